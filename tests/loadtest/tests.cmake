# Tests of loadtest/ (see tests/CMakeLists.txt for the helpers).
stockd_unit_test(loadtest_lathist SOURCES loadtest/test_lathist.c LIBS stockload_core)
stockd_unit_test(loadtest_answer SOURCES loadtest/test_answer.c LIBS stockload_core)
stockd_unit_test(loadtest_loadopts SOURCES loadtest/test_loadopts.c LIBS stockload_core)
stockd_unit_test(loadtest_reconcile SOURCES loadtest/test_reconcile.c LIBS stockload_core)
# The reconcile cases it shares with lab/ledger.py's test.
target_compile_definitions(loadtest_reconcile PRIVATE
  RECONCILE_CASES="${CMAKE_CURRENT_SOURCE_DIR}/lab/ledger_cases.json")

# stockload against a real nginx that plays every answer of the contract, and a real
# MariaDB for the reconciliation. Some twenty runs of stockload: 120 s ran out beside
# other tests on the loaded machine, hence the default 300.
stockd_integration_test(loadtest_stockload_nginx
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/stockload_nginx.sh $<TARGET_FILE:stockload>)

# loadtest/report, small: modes none, zk, redis and redis-renew on the report's own stack (inside this
# test's ports), checking every output and the verdicts it reports. Plain build only: it
# tests the report; those modes run under the sanitizers in the experiment's rows.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_report_smoke
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/report_smoke.sh $<TARGET_FILE:stockload>
    TIMEOUT 300 LABELS stack)
endif()

# docs/report/index.html in Debian's headless Chromium: the page --html-only makes of a
# small report.json fixture, and the committed page, render their title, tables and SVG
# charts with no broken image and no console message (screenshots under the test's run
# directory). No servers.
# Plain build only: no code of this build runs in it.
if(NOT STOCKD_SANITIZE)
  add_test(NAME loadtest_report_html COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/report_html.sh)
  set_tests_properties(loadtest_report_html PROPERTIES
    ENVIRONMENT "STOCKD_SRC=${PROJECT_SOURCE_DIR};STOCKD_TEST_RUN=${STOCKD_TEST_RUN}"
    LABELS "unit;browser" TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# The benchmark smokes below are SERIAL: each measures the whole machine (throughput,
# CPU per process, RSS) and runs several stacks' worth of processes on both cores.
# The headline benchmark in its short mode: both routes, both clients per
# load, two runs per cell (the median), one of the rows that need servers of their own
# (RedLock's three Redis), the HTTP ceiling, exact ledgers and the durability settings.
# About 75 s on the shared 2-core machine at load average ~20 (86-100 s under ctest then).
# Plain build only: it tests scripts and nginx, whose C paths the other tests already
# run under the sanitizers; this keeps the three builds inside CI's time.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_report_bench_smoke
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/report_bench_smoke.sh $<TARGET_FILE:stockload>
    LABELS loadtest SERIAL)
endif()
# The scale-out sweep, tiny: batched zk on 1 and 2 instances, both routes, both loads
# with both clients and the ceiling, one run per point: the rows, their instance
# counts, exact loads, and each load's mean batch per instance (the hot product on both
# instances under round-robin, on one under affinity). About 40 s. Plain build only, as
# the benchmark smoke above.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_report_scale_smoke
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/report_scale_smoke.sh $<TARGET_FILE:stockload>
    TIMEOUT 240 LABELS loadtest SERIAL)
endif()
# loadtest/cpu in a tiny run (zk, round-robin, 10 products, 2 s): a row per process
# kind, CPU for stockd and mariadbd, the deductions = the orders rows, the stock exact.
# About 30 s. Plain build only, as the benchmark smoke above: it tests a script over
# the whole stack, whose C paths the other tests run under the sanitizers.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_cpu_smoke
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/cpu_smoke.sh $<TARGET_FILE:stockload>
    TIMEOUT 120 LABELS loadtest SERIAL)
endif()
# loadtest/memory in a tiny run (two zk instances, two chunks of 1000 requests): a row
# per instance, the RSS after each chunk, the run exact and its ledger in the database.
# About 20 s. Plain build only, as the cpu smoke above.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_memory_smoke
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/memory_smoke.sh $<TARGET_FILE:stockload>
    TIMEOUT 120 LABELS loadtest SERIAL)
endif()
# loadtest/wrk-json.lua with the real wrk against a static HTTP server, read by
# lab/loadgen.py: requests, 2xx and non-2xx counted, the spread's ids drawn in range.
# Plain build only: no code of this build runs in it.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_wrk_json
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/wrk_json.sh TIMEOUT 60 LABELS loadtest)
endif()
# The source article's test in its own tool: loadtest/jmeter/run (Debian's JMeter 2.13
# through loadtest/jmeter/Launcher.java, 50 threads x 10 loops on a stock of 50) through
# nginx to three instances. Every answer is a 200 or a 409 (the plan's assertion), and
# JMeter's 200s are the orders rows and the stock change. Under zk the stock ends at 0;
# without a lock JMeter's ramp is too gentle to oversell in every run, so the verdict
# is printed and only the books are asserted. About 15 s each. Plain build only, as the
# smokes above: it tests a tool over the stack.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(loadtest_jmeter_zk_3_instances_ends_at_zero
    COMMAND env OVERSELL_TOOL=jmeter bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh zk 3 zero
    TIMEOUT 180 LABELS loadtest)
  stockd_integration_test(loadtest_jmeter_none_3_instances_books_agree
    COMMAND env OVERSELL_TOOL=jmeter bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh none 3 counted --batch-max 1
    TIMEOUT 180 LABELS loadtest)
endif()

# The experiment's rows of issue 42 (loadtest/orders, docs/orders.md): one customer
# with a limit of 1 sends 30 requests at once through 3 instances; without a lock
# (one acquisition per deduction, as the seed's rows) it gets more than 1 unit, with zk
# (batched: one batch may hold several of its requests) exactly 1. Reservations of 3 s,
# paid in time and late, cancelled at the expiry and twice, with a restock through the
# API: with zk the books add up and nothing is paid twice, late or beyond the stock.
stockd_integration_test(orders_row_limit_none_3_instances_sells_more_than_1
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/orders.sh limit none over-limit --batch-max 1
  LABELS experiment)
stockd_integration_test(orders_row_limit_zk_3_instances_sells_exactly_1
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/orders.sh limit zk one LABELS experiment)
stockd_integration_test(orders_row_reserve_zk_3_instances_books_add_up
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/loadtest/orders.sh reserve zk exact
  TIMEOUT 180 LABELS experiment)
