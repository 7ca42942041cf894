# Tests of the stack: scripts/stack and the Docker files (see tests/CMakeLists.txt for
# the helpers). The first three need no servers; the last two start their own.
set(STACK_TEST_ENV STOCKD_SRC=${PROJECT_SOURCE_DIR} STOCKD_TEST_RUN=${STOCKD_TEST_RUN})

# docker-compose.yml resolves with Debian's docker-compose and has the promised
# topology; docker/nginx.conf passes nginx -t; the Dockerfile's runtime stage names
# the right packages. Every library stockd and stockload load directly comes from a
# package that the Dockerfile's runtime stage installs (or from the base image). Both
# check files and the plain build's binaries (a sanitizer build's link their runtime
# too): plain build only.
if(NOT STOCKD_SANITIZE)
  add_test(NAME stack_compose_config COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/compose_config.sh)
  add_test(NAME stack_docker_runtime_libs
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/runtime_libs.sh $<TARGET_FILE:stockd>
            $<TARGET_FILE:stockload> $<TARGET_FILE:stock-writer>)
  set_tests_properties(stack_compose_config stack_docker_runtime_libs PROPERTIES
    ENVIRONMENT "${STACK_TEST_ENV}" LABELS "unit;stack" TIMEOUT 60 SKIP_RETURN_CODE 77)
  # docker-compose resolves the file six times (two of them with the override of owner
  # routing, docker/route-owner.yml): about 25 s on a quiet machine, more on a shared one.
  set_tests_properties(stack_compose_config PROPERTIES TIMEOUT 180)
endif()
# scripts/stack's command line: help, usage errors, commands on an empty run directory;
# and stockd's --config FILE end to end, on one stockd of its own (port base + 3: the
# fixture's servers use +6, +81 and +82, integration tests +100 on). Plain build only:
# it tests the script; stockd's config parser runs under the sanitizers in test_config.
stockd_test_port(STOCKD_CLI_TEST_PORT cli_test)
if(NOT STOCKD_SANITIZE)
  add_test(NAME stack_cli_usage COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_usage.sh
                                        $<TARGET_FILE:stockd> $<TARGET_FILE:stockload>)
  set_tests_properties(stack_cli_usage
    PROPERTIES ENVIRONMENT "${STACK_TEST_ENV};STOCKD_CLI_TEST_PORT=${STOCKD_CLI_TEST_PORT}"
    LABELS "unit;stack" TIMEOUT 60 SKIP_RETURN_CODE 77)
endif()

# Plain build only, the tests of this block: they test SQL files, scripts and nginx,
# whose stockd paths the other tests already run under the sanitizers (modes, restarts
# and SIGTERM; a ZooKeeper leader killed: fault_zk_ensemble_leader_killed_service_continues);
# this keeps the three builds inside CI's time.
if(NOT STOCKD_SANITIZE)
  # The MariaDB init files of docker-compose.yml, run in the image's order against a
  # real MariaDB: schema, seed and a service user with exactly the promised grants.
  stockd_integration_test(stack_docker_initdb_user
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/docker_initdb.sh TIMEOUT 120 LABELS stack)
  # scripts/stack end to end: up with 2 instances, status, a deduction through nginx,
  # a second up that keeps data and processes, restart-stockd in another mode, down.
  stockd_integration_test(stack_up_status_restart_down
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/up_down.sh TIMEOUT 300 LABELS stack)
  # scripts/stack up --zk-ensemble: three ZooKeeper servers that every stockd is given,
  # deductions through nginx, the leader killed and the deductions going on, a second up
  # starting it again, an up back to a standalone ZooKeeper, and down.
  stockd_integration_test(stack_up_zk_ensemble_leader_killed_down
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/up_ensemble.sh TIMEOUT 300 LABELS stack)
  # scripts/stack up --lock redlock --redis-sentinel: RedLock's three servers, a replica
  # and a Sentinel; a deduction in mode redlock, then in mode redis; the primary killed,
  # the replica promoted, restart-stockd pointing stockd at it; down. About 30 s.
  stockd_integration_test(stack_up_redlock_sentinel_failover_down
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/up_redlock_sentinel.sh TIMEOUT 300 LABELS stack)
endif()

# docker-compose.yml built and run for real with podman (docker/podman/compose): every
# image from debian:12, three stockd behind nginx on 127.0.0.1 and a three-server
# ZooKeeper ensemble; a ZooKeeper-locked load through nginx during which the leader's
# container is killed, the ledger matching the answers and the stock; the old leader
# started again, and a second load ending at exactly 0 with the ledger matching and the
# requests spread over the three containers; then the same stack with only the stockd containers made again
# in the lease modes redis and db-lock, the same load exact in each; then down -v and
# the network removed. It takes minutes (the
# images are built from source) and the images never contain this build's binaries, so
# it is registered in the plain build only: the sanitizer builds of scripts/test would
# run the same containers again. `ctest -LE container` leaves it out of a quick local
# run. Its compose project and image tag are named after the port base, so two checkouts
# with different port bases never share containers, a network or a volume.
stockd_test_port(STOCKD_CONTAINER_TEST_PORT container_test)
if(NOT STOCKD_SANITIZE)
  add_test(NAME stack_containers_compose_up_zk_redis_db_lock_exact
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/containers.sh)
  set_tests_properties(stack_containers_compose_up_zk_redis_db_lock_exact PROPERTIES
    ENVIRONMENT "${STACK_TEST_ENV};STOCKD_CONTAINER_TEST_PORT=${STOCKD_CONTAINER_TEST_PORT};STOCKD_CONTAINER_TEST_PROJECT=stockd-ct${STOCKD_TEST_PORT_BASE}"
    LABELS "stack;container" TIMEOUT 1500 RUN_SERIAL TRUE)
endif()
