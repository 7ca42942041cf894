# Tests of the documentation (tests/docs/docs_check.py says what each checks): no servers.
# Plain build only (tests/CMakeLists.txt): only it registers every test (the sanitizer
# builds leave out the nemesis, the container test, the benchmarks' smoke tests and
# these), so the cited names are checked against the plain build's ctest -N.
add_test(NAME docs_cited_tests_exist
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py tests ${PROJECT_SOURCE_DIR}
          ${PROJECT_BINARY_DIR} ${CMAKE_CTEST_COMMAND})
set_tests_properties(docs_cited_tests_exist PROPERTIES LABELS "unit;docs" TIMEOUT 60)
# The labels likewise: only the plain build has every one.
add_test(NAME docs_testing_lists_every_ctest_label
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py labels ${PROJECT_SOURCE_DIR}
          ${PROJECT_BINARY_DIR} ${CMAKE_CTEST_COMMAND})
set_tests_properties(docs_testing_lists_every_ctest_label PROPERTIES LABELS "unit;docs"
                     TIMEOUT 60)
# The build's test names are written out in tests/, as grep finds them.
add_test(NAME docs_ctest_names_are_written_in_tests
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py names ${PROJECT_SOURCE_DIR}
          ${PROJECT_BINARY_DIR} ${CMAKE_CTEST_COMMAND})
add_test(NAME docs_relative_links_resolve
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py links ${PROJECT_SOURCE_DIR})
add_test(NAME docs_readmes_carry_the_same_commands_options_and_numbers
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py readmes ${PROJECT_SOURCE_DIR})
add_test(NAME docs_operating_documents_every_stockd_option
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py options ${PROJECT_SOURCE_DIR}
          $<TARGET_FILE:stockd>)
add_test(NAME docs_operating_documents_every_writer_option
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py writer_options ${PROJECT_SOURCE_DIR}
          $<TARGET_FILE:stock-writer>)
add_test(NAME docs_readmes_table_every_stockd_mode
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py modes ${PROJECT_SOURCE_DIR}
          $<TARGET_FILE:stockd>)
add_test(NAME docs_readmes_headline_ratios_are_bench_json
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py headline ${PROJECT_SOURCE_DIR})
add_test(NAME docs_benchmarks_scale_curve_is_scale_json
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs_check.py scale ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_relative_links_resolve docs_readmes_table_every_stockd_mode
  docs_ctest_names_are_written_in_tests
  docs_readmes_headline_ratios_are_bench_json docs_benchmarks_scale_curve_is_scale_json
  docs_readmes_carry_the_same_commands_options_and_numbers
  docs_operating_documents_every_stockd_option docs_operating_documents_every_writer_option
  PROPERTIES LABELS "unit;docs" TIMEOUT 60)
