# The live page (web/live/) in headless Chromium (python3-selenium, chromium-driver):
# a stack of its own, scripts/demo --pace running none x3 then zk x3, and the page's DOM
# read for what it showed. About a minute; skipped without the two packages.
stockd_integration_test(live_page COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/live_page.sh
  TIMEOUT 300 LABELS live)
