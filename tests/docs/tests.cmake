# Tests of the documentation (see tests/CMakeLists.txt for the helpers): no servers.
# README.md and README.zh-CN.md name the same commands and every option of the built
# stockd's --help, and link to each other.
add_test(NAME docs_readmes_name_the_same_commands_and_options
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/readme_sync.py ${PROJECT_SOURCE_DIR}
          $<TARGET_FILE:stockd>)
set_tests_properties(docs_readmes_name_the_same_commands_and_options
  PROPERTIES LABELS "unit;docs" TIMEOUT 60)
