# The nemesis (loadtest/nemesis) and its history checker (loadtest/nemesis_check.py).
set(nemesis ${CMAKE_CURRENT_SOURCE_DIR}/nemesis)

# The checker on hand-made histories: a clean one passes, each anomaly is found.
add_test(NAME nemesis_checker_finds_each_anomaly
  COMMAND python3 ${nemesis}/test_nemesis_check.py)
set_tests_properties(nemesis_checker_finds_each_anomaly PROPERTIES LABELS "unit;nemesis"
  TIMEOUT 60)
