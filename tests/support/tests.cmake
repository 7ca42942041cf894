# The fault proxy of the tests (tests/support/fault_proxy.h): a library the C tests link,
# with its MySQL, ZooKeeper and Redis hooks, and the fault-proxy command the shell tests
# and loadtest/nemesis run ($STOCKD_BUILD/tests/support/fault-proxy).
set(support ${CMAKE_CURRENT_SOURCE_DIR}/support)
add_library(fault_proxy STATIC ${support}/fault_proxy.c ${support}/fault_proxy_mysql.c
            ${support}/fault_proxy_zk.c ${support}/fault_proxy_redis.c)
target_include_directories(fault_proxy PUBLIC ${support})
target_link_libraries(fault_proxy PUBLIC Threads::Threads)

add_executable(fault-proxy ${support}/fault_proxy_cli.c)
target_link_libraries(fault-proxy PRIVATE fault_proxy)
set_target_properties(fault-proxy PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                      ${PROJECT_BINARY_DIR}/tests/support)

# The proxy itself, against a stand-in upstream on loopback (about 3 s).
stockd_unit_test(fault_proxy_test SOURCES ${support}/fault_proxy_test.c LIBS fault_proxy)

# The command's --control file (blackhole, delay, cut, heal) against a stand-in upstream
# (about 2 s).
add_test(NAME fault_proxy_cli_control
  COMMAND python3 ${support}/test_fault_proxy_cli.py $<TARGET_FILE:fault-proxy>)
set_tests_properties(fault_proxy_cli_control PROPERTIES LABELS unit TIMEOUT 60)
