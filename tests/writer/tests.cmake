# Tests of writer/ (stock-writer, the order writer of mode redis-stock), each on a Redis
# of its own fed in the stream contract's format (writer/writerlib.sh).
stockd_integration_test(writer_exactly_once_duplicates_redelivery
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh exactly-once)
stockd_integration_test(writer_kill9_mid_load_second_writer_claims
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh kill9 LABELS fault)
stockd_integration_test(writer_mysql_restart_mid_load
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/writer/writer.sh mysql-restart LABELS fault)
