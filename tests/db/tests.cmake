# Tests of db/ (see tests/CMakeLists.txt for the helpers).

# stockdb_config_from_url: pure parsing, no server.
stockd_unit_test(stockdb_url_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/stockdb_url_test.c
                 LIBS stockdb)

# The transaction against the real MariaDB: one C program, two modes (stockdb_test.sh).
add_executable(stockdb_itest ${CMAKE_CURRENT_LIST_DIR}/stockdb_itest.c)
target_include_directories(stockdb_itest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(stockdb_itest PRIVATE stockdb PkgConfig::MYSQL Threads::Threads)

stockd_integration_test(stockdb_itest_shared
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stockdb_test.sh $<TARGET_FILE:stockdb_itest> shared
  TIMEOUT 300 LABELS db)
stockd_integration_test(stockdb_itest_restart
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stockdb_test.sh $<TARGET_FILE:stockdb_itest> restart
  TIMEOUT 300 LABELS db)
