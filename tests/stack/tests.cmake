# Tests of the stack: scripts/stack and the Docker files (see tests/CMakeLists.txt for
# the helpers). The first three need no servers; the last two start their own.
set(STACK_TEST_ENV STOCKD_SRC=${PROJECT_SOURCE_DIR} STOCKD_TEST_RUN=${STOCKD_TEST_RUN})

# docker-compose.yml resolves with Debian's docker-compose and has the promised
# topology; docker/nginx.conf passes nginx -t; the Dockerfile's runtime stage names
# the right packages.
add_test(NAME stack_compose_config COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/compose_config.sh)
# Every library stockd and stockload load directly comes from a package that the
# Dockerfile's runtime stage installs (or from the base image).
add_test(NAME stack_docker_runtime_libs
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/runtime_libs.sh $<TARGET_FILE:stockd>
          $<TARGET_FILE:stockload>)
# scripts/stack's command line: help, usage errors, commands on an empty run directory.
add_test(NAME stack_cli_usage COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_usage.sh)
set_tests_properties(stack_compose_config stack_docker_runtime_libs stack_cli_usage
  PROPERTIES ENVIRONMENT "${STACK_TEST_ENV}" LABELS "unit;stack" TIMEOUT 60
  SKIP_RETURN_CODE 77)

# The MariaDB init files of docker-compose.yml, run in the image's order against a
# real MariaDB: schema, seed and a service user with exactly the promised grants.
stockd_integration_test(stack_docker_initdb_user
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/docker_initdb.sh TIMEOUT 120 LABELS stack)
# scripts/stack end to end: up with 2 instances, status, a deduction through nginx,
# a second up that keeps data and processes, restart-stockd in another mode, down.
stockd_integration_test(stack_up_status_restart_down
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/up_down.sh TIMEOUT 300 LABELS stack)
