# The live page (web/live/) in headless Chromium (python3-selenium, chromium-driver):
# a stack of its own, scripts/demo --pace running none x3 then zk x3, and the page's DOM
# read for what it showed. About 30 s; skipped without the two packages.
# Plain build only: it tests a page, scripts and nginx; the stockd routes it reads (GET
# /stock, /lock/queue with a holder and a waiter, /metrics) and modes none and zk under
# load run under the sanitizers in http_contract, lock_queue and the oversell tests.
if(NOT STOCKD_SANITIZE)
  # SERIAL: a whole stack, Chromium and Prometheus's alert rule, whose evaluation must
  # fire within the page's wait; beside other tests it did not (fresh clone, ctest -j4).
  stockd_integration_test(live_page COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/live_page.sh
    TIMEOUT 300 LABELS live SERIAL)
endif()
