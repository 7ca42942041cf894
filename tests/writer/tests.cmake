# Tests of writer/ (stock-writer, the order writer of mode redis-stock), each on a Redis
# of its own fed in the stream contract's format (writer/writerlib.sh).
stockd_integration_test(writer_exactly_once_duplicates_redelivery
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh exactly-once)
stockd_integration_test(writer_kill9_mid_load_second_writer_claims
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh kill9 LABELS fault SANITIZED)
stockd_integration_test(writer_mysql_restart_mid_load
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh mysql-restart LABELS fault)
stockd_integration_test(redis_stock_maxmemory_deductions_go_on_once_drained
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh maxmemory TIMEOUT 300)
# Mode redis-stock across a Sentinel failover (writer/redis_failover.sh): without a
# mitigation, with stockd's WAIT, with the writer's WAIT too, with
# min-replicas-to-write. Plain build only, as
# sentinel_failover_*: scripts and servers, whose C paths the tests above already run
# under the sanitizers.
if(NOT STOCKD_SANITIZE)
  stockd_integration_test(redis_stock_failover_no_wait_loses_and_oversells
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/redis_failover.sh none LABELS fault)
  stockd_integration_test(redis_stock_failover_wait_no_loss_still_oversells
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/redis_failover.sh wait LABELS fault)
  stockd_integration_test(redis_stock_failover_wait_and_writer_wait_exact
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/redis_failover.sh wait-writer LABELS fault)
  stockd_integration_test(redis_stock_failover_min_replicas_exact
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/redis_failover.sh min-replicas LABELS fault)
endif()
