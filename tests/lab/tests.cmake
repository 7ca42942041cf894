# Unit tests of the lab library (lab/): pure logic, no servers, with Debian's python3
# (the library uses its packaged modules only).
foreach(t ledger runspec prom loadgen report)
  add_test(NAME lab_${t} COMMAND /usr/bin/python3 -m unittest -v tests.lab.test_${t}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(lab_${t} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()
