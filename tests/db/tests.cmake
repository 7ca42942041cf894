# Tests of db/ (see tests/CMakeLists.txt for the helpers).

# stockdb_config_from_url: pure parsing, no server.
stockd_unit_test(stockdb_url_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/stockdb_url_test.c
                 LIBS stockdb)

# The transaction against the real MariaDB: one C program, two modes (stockdb_test.sh).
add_executable(stockdb_itest ${CMAKE_CURRENT_LIST_DIR}/stockdb_itest.c)
target_include_directories(stockdb_itest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(stockdb_itest PRIVATE stockdb fault_proxy PkgConfig::MYSQL
                      Threads::Threads)

# One ctest entry per case of the shared mode, stockdb_itest_CASE, each in a database of
# its own, so that one failed check hides no other case. The names come from the case
# table at the end of stockdb_itest.c (its WITH_DB/ALONE/RELAYED lines), so a new case is
# registered by adding its line there. The cases share one block of test ports (only the
# two RELAYED ones listen, on PORT0+1), hence the resource lock.
set(_itest_src ${CMAKE_CURRENT_LIST_DIR}/stockdb_itest.c)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_itest_src})
file(STRINGS ${_itest_src} _itest_lines REGEX "^    (WITH_DB|ALONE|RELAYED)\\(test_[a-z0-9_]+\\),$")
set(_first "")
foreach(_line IN LISTS _itest_lines)
  string(REGEX REPLACE "^.*\\(test_([a-z0-9_]+)\\),$" "\\1" _case "${_line}")
  set(_name stockdb_itest_${_case})
  set(_cmd bash ${CMAKE_CURRENT_LIST_DIR}/stockdb_test.sh $<TARGET_FILE:stockdb_itest> shared
      ${_case})
  if(NOT _first)
    stockd_integration_test(${_name} COMMAND ${_cmd} TIMEOUT 120 LABELS db)
    set(_first ${_name})
    get_test_property(${_first} ENVIRONMENT _first_env)
  else()
    add_test(NAME ${_name} COMMAND ${_cmd})
    string(REPLACE "STOCKD_TEST_NAME=${_first}" "STOCKD_TEST_NAME=${_name}" _env "${_first_env}")
    set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED servers ENVIRONMENT "${_env}"
                         LABELS "integration;db" TIMEOUT 120 SKIP_RETURN_CODE 77)
  endif()
  set_tests_properties(${_name} PROPERTIES RESOURCE_LOCK stockdb_itest_ports)
endforeach()
list(LENGTH _itest_lines _n)
if(_n LESS 2)
  message(FATAL_ERROR "tests/db/tests.cmake found ${_n} cases in ${_itest_src}")
endif()
stockd_integration_test(stockdb_itest_restart
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stockdb_test.sh $<TARGET_FILE:stockdb_itest> restart
  TIMEOUT 300 LABELS db)

# Mode redis-stock's script (db/stockredis.h) against a Redis of the test's own.
add_executable(stockredis_itest ${CMAKE_CURRENT_LIST_DIR}/stockredis_itest.c)
target_include_directories(stockredis_itest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(stockredis_itest PRIVATE stockredis Threads::Threads)
stockd_integration_test(stockredis_script_loads_once_and_never_goes_negative
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stockredis_test.sh $<TARGET_FILE:stockredis_itest>
  LABELS db)
