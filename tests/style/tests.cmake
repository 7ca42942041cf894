# Style the tools enforce; no servers.
add_test(NAME c_files_are_clang_formatted
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/clang_format.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(c_files_are_clang_formatted PROPERTIES LABELS unit TIMEOUT 120
                     SKIP_RETURN_CODE 77)
