# The lab library's unit tests (lab/, python3 -m unittest): the port layout, the state
# file, the nginx template and scripts/stack's option errors. No servers.
add_test(NAME lab_unit COMMAND ${STOCKD_PYTHON} -m unittest -v tests/lab/test_lab.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(lab_unit PROPERTIES LABELS unit TIMEOUT 60)
