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
# its own, so that one failed check hides no other case: one row per case of the table at
# the end of stockdb_itest.c, in its order; stockdb_itest_rows_match_its_list checks the
# rows against `stockdb_itest list`. The cases share one block of test ports (only the
# two RELAYED ones listen, on PORT0+1), hence the resource lock: the first row takes the
# block, the others run in its environment under their own names.
set(_stockdb_itest_first "")
set(_stockdb_itest_rows "")
# stockdb_itest_case(NAME): the case NAME without its "stockdb_itest_" prefix.
function(stockdb_itest_case name)
  string(REGEX REPLACE "^stockdb_itest_" "" case ${name})
  set(cmd bash ${CMAKE_CURRENT_LIST_DIR}/stockdb_test.sh $<TARGET_FILE:stockdb_itest> shared ${case})
  if(NOT _stockdb_itest_first)
    stockd_integration_test(${name} COMMAND ${cmd} TIMEOUT 120 LABELS db)
    set(_stockdb_itest_first ${name} PARENT_SCOPE)
  else()
    add_test(NAME ${name} COMMAND ${cmd})
    get_test_property(${_stockdb_itest_first} ENVIRONMENT env)
    string(REPLACE "STOCKD_TEST_NAME=${_stockdb_itest_first}" "STOCKD_TEST_NAME=${name}" env "${env}")
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED servers ENVIRONMENT "${env}"
                         LABELS "integration;db" TIMEOUT 120 SKIP_RETURN_CODE 77)
  endif()
  set_tests_properties(${name} PROPERTIES RESOURCE_LOCK stockdb_itest_ports)
  set(_stockdb_itest_rows "${_stockdb_itest_rows}${case}\n" PARENT_SCOPE)
endfunction()
stockdb_itest_case(stockdb_itest_deduct_lowers_stock_and_writes_one_order)
stockdb_itest_case(stockdb_itest_sold_out_writes_nothing)
stockdb_itest_case(stockdb_itest_unknown_product_is_not_found)
stockdb_itest_case(stockdb_itest_fencing_accepts_equal_or_newer_and_refuses_older)
stockdb_itest_case(stockdb_itest_fence_refuses_a_write_based_on_a_stale_check)
stockdb_itest_case(stockdb_itest_fence_refuses_a_write_after_a_late_commit_under_the_same_token)
stockdb_itest_case(stockdb_itest_fence_kinds_are_not_compared_with_each_other)
stockdb_itest_case(stockdb_itest_guard_refusal_rolls_back)
stockdb_itest_case(stockdb_itest_request_id_replays_the_first_order)
stockdb_itest_case(stockdb_itest_batch_serves_the_first_k_in_order)
stockdb_itest_case(stockdb_itest_batch_keys_keep_their_meaning)
stockdb_itest_case(stockdb_itest_batch_refused_or_fenced_rolls_back_whole)
stockdb_itest_case(stockdb_itest_round_trips_are_counted_at_the_minimum)
stockdb_itest_case(stockdb_itest_batch_on_a_segment)
stockdb_itest_case(stockdb_itest_an_open_read_never_serves_a_stale_snapshot)
stockdb_itest_case(stockdb_itest_an_unfindable_duplicate_key_fails_one_item_not_the_batch)
stockdb_itest_case(stockdb_itest_keys_differing_in_case_are_different_orders)
stockdb_itest_case(stockdb_itest_an_idle_handle_holds_no_metadata_lock)
stockdb_itest_case(stockdb_itest_multi_products_commit_all_or_nothing)
stockdb_itest_case(stockdb_itest_multi_products_cost_2k_plus_2_statements)
stockdb_itest_case(stockdb_itest_multi_one_stale_row_commits_nothing)
stockdb_itest_case(stockdb_itest_multi_duplicate_keys)
stockdb_itest_case(stockdb_itest_multi_thinks_before_any_write)
stockdb_itest_case(stockdb_itest_batch_order_ids_are_real_with_an_increment_of_2)
stockdb_itest_case(stockdb_itest_a_silent_write_transaction_is_ended_by_the_server)
stockdb_itest_case(stockdb_itest_new_checks_arguments)
stockdb_itest_case(stockdb_itest_lock_wait_timeout_is_deadlock)
stockdb_itest_case(stockdb_itest_twins_with_one_key_deduct_once)
stockdb_itest_case(stockdb_itest_race_safe_strategies_end_at_zero)
stockdb_itest_case(stockdb_itest_lost_commit_is_confirmed_by_request_id)
stockdb_itest_case(stockdb_itest_a_commit_lost_in_a_partition_frees_the_row)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/stockdb_itest_rows.txt "${_stockdb_itest_rows}")
add_test(NAME stockdb_itest_rows_match_its_list
  COMMAND sh -c "\"$0\" list | diff -u \"$1\" -" $<TARGET_FILE:stockdb_itest>
          ${CMAKE_CURRENT_BINARY_DIR}/stockdb_itest_rows.txt)
set_tests_properties(stockdb_itest_rows_match_its_list PROPERTIES LABELS "unit;db" TIMEOUT 60)
stockd_integration_test(stockdb_itest_restart
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stockdb_test.sh $<TARGET_FILE:stockdb_itest> restart
  TIMEOUT 300 LABELS db)

# Mode redis-stock's script (db/stockredis.h) against a Redis of the test's own.
add_executable(stockredis_itest ${CMAKE_CURRENT_LIST_DIR}/stockredis_itest.c)
target_include_directories(stockredis_itest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(stockredis_itest PRIVATE stockredis fault_proxy Threads::Threads)
stockd_integration_test(stockredis_script_loads_once_and_never_goes_negative
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stockredis_test.sh $<TARGET_FILE:stockredis_itest>
  LABELS db)
