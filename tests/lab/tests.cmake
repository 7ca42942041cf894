# Unit tests of the lab library (lab/): pure logic, no servers, with STOCKD_PYTHON (Debian's
# python3: the library uses its packaged modules only). test_stack covers the port
# layout, the state file, the nginx template and scripts/stack's option errors; test_shell
# the /metrics calls of the shell tests' helpers; test_runspec the presets against the
# modes stockd reports.
foreach(t ledger runspec prom loadgen report reportrun stack shell)
  add_test(NAME lab_${t} COMMAND ${STOCKD_PYTHON} -m unittest -v tests.lab.test_${t}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(lab_${t} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()
# lab_runspec checks the presets against this build's stockd --list-modes.
set_tests_properties(lab_runspec PROPERTIES ENVIRONMENT STOCKD_BIN=$<TARGET_FILE:stockd>)
