# Tests of lock/ (see tests/CMakeLists.txt for the helpers). All run against a real
# ZooKeeper: the shared one of the `servers` fixture, or one of their own under
# $T for the restart test.
add_library(lock_test_util STATIC lock/lock_test.c)
target_include_directories(lock_test_util PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
                                                 ${CMAKE_CURRENT_SOURCE_DIR}/lock)
target_link_libraries(lock_test_util PUBLIC zklock fault_proxy)

# lock_c_test(NAME [ARGS...]): builds tests/lock/NAME.c and runs it as an
# integration test.
function(lock_c_test name)
  add_executable(${name} lock/${name}.c)
  target_link_libraries(${name} PRIVATE lock_test_util)
  stockd_integration_test(${name} COMMAND ${name} ${ARGN} TIMEOUT 180 LABELS lock)
endfunction()

# Mutual exclusion, checked by the benchmark tool (lock/bench/zklock_bench.c):
# 3 processes x 3 threads x 30 acquisitions on one lock.
set(ZKLOCK_BENCH zklock-bench --zk 127.0.0.1:${STOCKD_TEST_ZK_PORT})
stockd_integration_test(lock_mutex_fair
  COMMAND ${ZKLOCK_BENCH} --kind fair --procs 3 --threads 3 --iterations 30 --expect-all
  TIMEOUT 180 LABELS lock)
stockd_integration_test(lock_mutex_herd
  COMMAND ${ZKLOCK_BENCH} --kind herd --procs 3 --threads 3 --iterations 30 --expect-all
  TIMEOUT 180 LABELS lock)

# The negative control: without the lock the same run must fail.
stockd_integration_test(lock_mutex_control
  COMMAND ${ZKLOCK_BENCH} --no-lock --procs 3 --threads 3 --iterations 10 --expect-all
  TIMEOUT 60 LABELS lock)
# It passes only on the overlap check failing, not on any failure (a crash, a bad
# option) that WILL_FAIL would also have counted. The unlocked section races on
# purpose, so ThreadSanitizer is told not to report it (its report would also turn
# into failed processes); any other sanitizer report still fails the control.
set_tests_properties(lock_mutex_control PROPERTIES
  PASS_REGULAR_EXPRESSION "FAIL: overlaps: expected 0, got [1-9]"
  FAIL_REGULAR_EXPRESSION "FAIL: processes that failed|FAIL: committed sections|Sanitizer")
set_property(TEST lock_mutex_control APPEND PROPERTY ENVIRONMENT "TSAN_OPTIONS=report_bugs=0")

lock_c_test(lock_fair_order_test)
lock_c_test(lock_timeout_test)
lock_c_test(lock_reentrant_test)
lock_c_test(lock_expiry_test)
lock_c_test(lock_watches_test)
lock_c_test(lock_lost_reply_test)
lock_c_test(lock_cache_pause_test)
lock_c_test(lock_fencing_test)
lock_c_test(lock_ops_test)
lock_c_test(lock_restart_test)
lock_c_test(lock_cache_test)
# Many locks tried and released in one round trip (zklock_many.c); a few seconds.
lock_c_test(lock_many_test)

stockd_unit_test(lock_child_seq_test SOURCES lock/lock_child_seq_test.c LIBS zklock)
# The library at ZooKeeper's sequence limit, run by zk_lock_refused_at_the_sequence_limit
# (tests/service/zk_seq_limit.sh) on the ZooKeeper it starts: not a test of its own.
add_executable(zk_seq_limit_probe lock/zk_seq_limit_probe.c)
target_link_libraries(zk_seq_limit_probe PRIVATE lock_test_util)

# lock/lock.h without a server: the registry, codes, none and local, and the lease pool
# and watchdog on an in-memory lease kind (under a second).
stockd_unit_test(lock_face_test SOURCES lock/lock_face_test.c LIBS lock)

# Restarts its own ZooKeeper while one process holds and others wait.
stockd_integration_test(lock_zk_restart_test
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lock/lock_zk_restart_test.sh
          $<TARGET_FILE:zklock-bench>
  TIMEOUT 240 LABELS lock)

# The benchmark tool, briefly: only no overlap and some acquisitions are asserted.
stockd_integration_test(lock_bench_smoke
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lock/lock_bench_smoke.sh $<TARGET_FILE:zklock-bench>
  TIMEOUT 120 LABELS lock)

# ---------------------------------------------------------------- lease locks
# redislock and dblock, on the fixture's Redis and the test's own database
# (lease_lock_test.sh makes it and passes both in the environment).
set(LEASE_RUN bash ${CMAKE_CURRENT_SOURCE_DIR}/lock/lease_lock_test.sh)

# lease_c_program(NAME): builds tests/lock/NAME.c with both lease kinds and stockdb.
function(lease_c_program name)
  add_executable(${name} lock/${name}.c)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE redislock dblock stockdb PkgConfig::HIREDIS
                        PkgConfig::MYSQL Threads::Threads)
endfunction()
lease_c_program(lock_redis_test)
lease_c_program(lock_db_test)
lease_c_program(lock_lease_fault_test)
target_link_libraries(lock_lease_fault_test PRIVATE lock)

stockd_integration_test(lock_redis_test COMMAND ${LEASE_RUN} $<TARGET_FILE:lock_redis_test>
  TIMEOUT 180 LABELS lock)
stockd_integration_test(lock_db_test COMMAND ${LEASE_RUN} $<TARGET_FILE:lock_db_test>
  TIMEOUT 180 LABELS lock)

# Mutual exclusion under contention: 3 processes x 3 threads x 30 acquisitions, one
# handle per thread, checked by lease-bench (lock/bench/lease_bench.c); and its
# negative control, which must fail the overlap check.
set(LEASE_BENCH $<TARGET_FILE:lease-bench> --procs 3 --threads 3)
stockd_integration_test(lock_mutex_redis
  COMMAND ${LEASE_RUN} sh -c "exec \"$0\" --kind redis --redis \"$STOCKD_TEST_REDIS\" \"$@\""
          ${LEASE_BENCH} --iterations 30 --expect-all
  TIMEOUT 180 LABELS lock)
stockd_integration_test(lock_mutex_db
  COMMAND ${LEASE_RUN} sh -c "exec \"$0\" --kind db --mysql \"$STOCKD_TEST_MYSQL_URL\" \"$@\""
          ${LEASE_BENCH} --iterations 30 --expect-all
  TIMEOUT 180 LABELS lock)
stockd_integration_test(lock_mutex_lease_control
  COMMAND ${LEASE_RUN} sh -c "exec \"$0\" --kind redis --redis \"$STOCKD_TEST_REDIS\" \"$@\""
          ${LEASE_BENCH} --iterations 10 --expect-all --no-lock
  TIMEOUT 60 LABELS lock)
set_tests_properties(lock_mutex_lease_control PROPERTIES
  PASS_REGULAR_EXPRESSION "FAIL: overlaps: expected 0, got [1-9]"
  FAIL_REGULAR_EXPRESSION "FAIL: processes that failed|FAIL: committed sections|Sanitizer")
set_property(TEST lock_mutex_lease_control APPEND PROPERTY ENVIRONMENT "TSAN_OPTIONS=report_bugs=0")

# A holder killed with SIGKILL: the lock is taken over after its lease, not before.
stockd_integration_test(lock_takeover_after_kill9_redis
  COMMAND ${LEASE_RUN} $<TARGET_FILE:lock_lease_fault_test> takeover redis
  TIMEOUT 120 LABELS lock)
stockd_integration_test(lock_takeover_after_kill9_db
  COMMAND ${LEASE_RUN} $<TARGET_FILE:lock_lease_fault_test> takeover db
  TIMEOUT 120 LABELS lock)

# A holder SIGSTOPped past its lease while another buys the last unit: with the fence
# its late write is refused (stock 0, 1 order); without, the unit is sold twice
# (stock -1, 2 orders).
stockd_integration_test(lock_paused_holder_redis_fenced_refused
  COMMAND ${LEASE_RUN} --stock 1 --orders 1
          $<TARGET_FILE:lock_lease_fault_test> paused redis fenced
  TIMEOUT 120 LABELS lock)
stockd_integration_test(lock_paused_holder_redis_unfenced_oversells
  COMMAND ${LEASE_RUN} --stock 1 --orders 2
          $<TARGET_FILE:lock_lease_fault_test> paused redis unfenced
  TIMEOUT 120 LABELS lock)
stockd_integration_test(lock_paused_holder_db_fenced_refused
  COMMAND ${LEASE_RUN} --stock 1 --orders 1
          $<TARGET_FILE:lock_lease_fault_test> paused db fenced
  TIMEOUT 120 LABELS lock)
stockd_integration_test(lock_paused_holder_db_unfenced_oversells
  COMMAND ${LEASE_RUN} --stock 1 --orders 2
          $<TARGET_FILE:lock_lease_fault_test> paused db unfenced
  TIMEOUT 120 LABELS lock)

# ---------------------------------------------------------------- RedLock
# lock/redlock.c against three Redis servers of the test's own (redlock_test.sh starts
# them on the test's ports +15..+17 and passes the list in STOCKD_TEST_REDLOCK). The
# library test takes about 3 s; the mutual-exclusion run about 5 s.
set(REDLOCK_RUN bash ${CMAKE_CURRENT_SOURCE_DIR}/lock/redlock_test.sh)
add_executable(lock_redlock_test lock/lock_redlock_test.c)
target_include_directories(lock_redlock_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(lock_redlock_test PRIVATE redlock stockdb fault_proxy PkgConfig::HIREDIS
                      Threads::Threads)
stockd_integration_test(lock_redlock_test COMMAND ${REDLOCK_RUN} $<TARGET_FILE:lock_redlock_test>
  TIMEOUT 120 LABELS lock)
stockd_integration_test(lock_mutex_redlock
  COMMAND ${REDLOCK_RUN} sh -c "exec \"$0\" --kind redlock --redis \"$STOCKD_TEST_REDLOCK\" \"$@\""
          ${LEASE_BENCH} --iterations 30 --expect-all
  TIMEOUT 180 LABELS lock)
# ---------------------------------------------------------------- etcd
# etcdlock on the fixture's etcd (STOCKD_TEST_ETCD): mutual exclusion over processes and
# threads, FIFO order, growing tokens, timeouts, the keep-alive, a lease that ends; and
# an etcd of its own (the test's port +17, peer +16) stopped and started again.
# About 25 s, most of it the lease tests' waits for a TTL and its own etcd's restart.
add_executable(lock_etcd_test lock/lock_etcd_test.c)
target_include_directories(lock_etcd_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(lock_etcd_test PRIVATE etcdlock stockdb PkgConfig::MYSQL Threads::Threads)
stockd_integration_test(lock_etcd_test COMMAND ${LEASE_RUN} $<TARGET_FILE:lock_etcd_test>
  TIMEOUT 180 LABELS lock)
# etcdlock built with ETCDLOCK_LIBCURL naming a library that is not there: mode etcd is
# refused with a clear error, and the other kinds still work. No server; well under 1 s.
stockd_unit_test(etcd_no_libcurl_test
  SOURCES lock/etcd_no_libcurl_test.c ${PROJECT_SOURCE_DIR}/lock/etcdlock.c
          ${PROJECT_SOURCE_DIR}/lock/etcdlock_http.c ${PROJECT_SOURCE_DIR}/lock/etcdlock_view.c
  LIBS lock_base PkgConfig::CJSON Threads::Threads ${CMAKE_DL_LIBS})
target_include_directories(etcd_no_libcurl_test PRIVATE ${PROJECT_SOURCE_DIR}/lock
                                                        ${CURL_INCLUDE_DIRS})
target_compile_definitions(etcd_no_libcurl_test
  PRIVATE ETCDLOCK_LIBCURL="libcurl-absent-for-stockd-test.so.4")

# lock_view_read (GET /lock/queue's source): the zk queue of a holder and two waiters of
# three sessions, in order with their owners and watches, and a Redis lease; seconds.
add_executable(lock_view_test lock/lock_view_test.c)
target_link_libraries(lock_view_test PRIVATE lock_test_util lock)
stockd_integration_test(lock_view_test COMMAND lock_view_test TIMEOUT 120 LABELS lock)
