# Bad input, fuzzing and security tests (see tests/CMakeLists.txt for the helpers).

# Hostile and malformed requests, table-driven, to stockd directly and through nginx.
stockd_integration_test(security_bad_input
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bad_input.sh TIMEOUT 300 LABELS security)
# Slow clients are closed by the connection timeout; idle sockets over the connection
# limit wait and are served later, and through nginx they never reach stockd.
stockd_integration_test(security_connections
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/connections.sh TIMEOUT 300 LABELS security)

# The fuzz target's invariants over the committed corpus, in every build (gcc too).
add_executable(fuzz_request_replay ${CMAKE_CURRENT_LIST_DIR}/fuzz_request.c
                                   ${CMAKE_CURRENT_LIST_DIR}/fuzz_replay.c)
target_link_libraries(fuzz_request_replay PRIVATE stockd_core)
add_test(NAME security_fuzz_corpus_replay
         COMMAND fuzz_request_replay ${CMAKE_CURRENT_LIST_DIR}/corpus)
set_tests_properties(security_fuzz_corpus_replay PROPERTIES LABELS "unit;security" TIMEOUT 60)

# The libFuzzer build: clang with -fsanitize=fuzzer,address,undefined, compiled directly
# from the sources it needs (contract.c for routing and answers, stockdb_url.c for the URL
# parser) so that they are instrumented too. It is made by a custom command with clang
# itself, whatever compiler builds the rest, and only when a clang that can link a
# fuzzer is found (Debian: clang, libclang-rt-14-dev); otherwise it is left out. Its flags
# are its own, the same in every build, so it is built and run in the plain build only:
# the sanitizer builds would run the same binary for the same 30 s.
if(NOT STOCKD_SANITIZE)
if(CMAKE_C_COMPILER_ID STREQUAL "Clang")
  set(STOCKD_FUZZ_CC ${CMAKE_C_COMPILER})
else()
  find_program(STOCKD_FUZZ_CC NAMES clang clang-16 clang-15 clang-14)
endif()
set(STOCKD_FUZZ_OK FALSE)
if(STOCKD_FUZZ_CC)
  set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz-probe)
  file(MAKE_DIRECTORY ${probe_dir})
  file(WRITE ${probe_dir}/probe.c
    "#include <stddef.h>\n#include <stdint.h>\n"
    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(
    COMMAND ${STOCKD_FUZZ_CC} -fsanitize=fuzzer,address,undefined ${probe_dir}/probe.c
            -o ${probe_dir}/probe
    RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(probe_rc EQUAL 0)
    set(STOCKD_FUZZ_OK TRUE)
  endif()
endif()
if(STOCKD_FUZZ_OK)
  message(STATUS "fuzz_request: libFuzzer build with ${STOCKD_FUZZ_CC}")
  set(fuzz_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_request)
  set(fuzz_srcs ${CMAKE_CURRENT_LIST_DIR}/fuzz_request.c ${PROJECT_SOURCE_DIR}/service/contract.c
                ${PROJECT_SOURCE_DIR}/db/stockdb_url.c ${PROJECT_SOURCE_DIR}/hostport/hostport.c)
  set(fuzz_inc ${PROJECT_SOURCE_DIR}/service ${PROJECT_SOURCE_DIR}/db ${PROJECT_SOURCE_DIR}/lock
               ${PROJECT_SOURCE_DIR}/hostport ${CJSON_INCLUDE_DIRS} ${MYSQL_INCLUDE_DIRS})
  list(TRANSFORM fuzz_inc PREPEND -I)
  add_custom_command(
    OUTPUT ${fuzz_bin}
    COMMAND ${STOCKD_FUZZ_CC} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -g -O1
            -fno-omit-frame-pointer
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all ${fuzz_inc}
            ${fuzz_srcs} -o ${fuzz_bin} ${CJSON_LINK_LIBRARIES} ${MYSQL_LINK_LIBRARIES}
    DEPENDS ${fuzz_srcs} ${PROJECT_SOURCE_DIR}/service/stockd.h ${PROJECT_SOURCE_DIR}/db/stockdb.h
    COMMENT "Building the libFuzzer target fuzz_request with ${STOCKD_FUZZ_CC}"
    VERBATIM)
  add_custom_target(fuzz_request ALL DEPENDS ${fuzz_bin})
  # A bounded run over the committed corpus; new inputs go to a scratch directory in
  # the build tree, crashes to fuzz-artifacts/. Any crash or leak fails the test.
  set(fuzz_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-work)
  add_test(NAME security_fuzz_request
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
            ${fuzz_bin} -max_total_time=30 -runs=5000000 -timeout=10 -rss_limit_mb=2048
            -max_len=4096 -dict=${CMAKE_CURRENT_LIST_DIR}/fuzz_request.dict
            -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts/
            ${fuzz_work} ${CMAKE_CURRENT_LIST_DIR}/corpus)
  set_tests_properties(security_fuzz_request PROPERTIES LABELS "security;fuzz" TIMEOUT 120)
  file(MAKE_DIRECTORY ${fuzz_work} ${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts)
else()
  message(STATUS "fuzz_request: no clang with libFuzzer; only the corpus replay is built")
endif()
endif()

# No SQL made with printf or concatenation in db/ and service/ (the scanner proves
# first, on sources of its own, that it catches each way of doing it). It reads the
# sources: plain build only.
if(NOT STOCKD_SANITIZE)
  add_test(NAME security_sql_not_formatted
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sql_scan.sh)
  set_tests_properties(security_sql_not_formatted PROPERTIES
    ENVIRONMENT STOCKD_SRC=${PROJECT_SOURCE_DIR} LABELS "unit;security" TIMEOUT 60)
endif()
# The service user's grants, listed and tried.
stockd_integration_test(security_mysql_grants
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/grants.sh TIMEOUT 120 LABELS security)
# A whole stack (scripts/stack) listens on loopback only.
stockd_integration_test(security_loopback_only
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/loopback.sh TIMEOUT 300 LABELS security)
# The database password never shows in logs, answers or the process list.
stockd_integration_test(security_password_hidden
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/password.sh TIMEOUT 180 LABELS security)

# Issue 16, defect 12: credentials and configuration.
# Redis with an ACL user and a password: right one deducts exactly; wrong or none 503.
stockd_integration_test(security_redis_auth
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/redis_auth.sh TIMEOUT 120 LABELS security)
# ZooKeeper digest ACL: an unauthenticated client cannot touch the lock nodes; exact
# under load with auth on. SERIAL: the probe must read the held node inside the
# holder's 3 s think; beside other tests the holder was done and its parent reaped.
add_executable(zk_acl_probe ${CMAKE_CURRENT_LIST_DIR}/zk_acl_probe.c)
target_link_libraries(zk_acl_probe PRIVATE ZooKeeper::mt)
stockd_integration_test(security_zk_acl
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/zk_acl.sh $<TARGET_FILE:zk_acl_probe>
  TIMEOUT 240 LABELS security SERIAL)
