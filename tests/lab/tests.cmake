# Unit tests of the lab library (lab/): pure logic, no servers, with STOCKD_PYTHON (Debian's
# python3: the library uses its packaged modules only). test_stack covers the port
# layout, the state file, the nginx template and scripts/stack's option errors; test_shell
# the /metrics calls of the shell tests' helpers; test_runspec the presets against the
# modes stockd reports.
# stockd_lab_test(NAME MODULE): NAME runs tests/lab/MODULE.py's unit tests.
function(stockd_lab_test name module)
  add_test(NAME ${name} COMMAND ${STOCKD_PYTHON} -m unittest -v tests.lab.${module}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 60)
endfunction()
stockd_lab_test(lab_ledger test_ledger)
stockd_lab_test(lab_runspec test_runspec)
stockd_lab_test(lab_prom test_prom)
stockd_lab_test(lab_loadgen test_loadgen)
stockd_lab_test(lab_report test_report)
stockd_lab_test(lab_reportrun test_reportrun)
stockd_lab_test(lab_stack test_stack)
stockd_lab_test(lab_shell test_shell)
stockd_lab_test(lab_orders test_orders)
# lab_runspec checks the presets against this build's stockd --list-modes.
set_tests_properties(lab_runspec PROPERTIES ENVIRONMENT STOCKD_BIN=$<TARGET_FILE:stockd>)
