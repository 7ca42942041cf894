# Tests of service/ (see tests/CMakeLists.txt for the helpers).
stockd_unit_test(test_contract SOURCES service/test_contract.c LIBS stockd_core)
stockd_unit_test(test_config SOURCES service/test_config.c LIBS stockd_core)
stockd_unit_test(test_jobq SOURCES service/test_jobq.c LIBS stockd_core)

stockd_integration_test(http_contract COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/http_contract.sh)
# The seed's three experiments: no lock on 3 instances oversells; a process mutex is
# right on one instance and wrong on three.
stockd_integration_test(oversell_none_3_instances_goes_negative
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh none 3 negative LABELS experiment)
stockd_integration_test(oversell_local_1_instance_ends_at_zero
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh local 1 zero LABELS experiment)
stockd_integration_test(oversell_local_3_instances_goes_negative
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh local 3 negative LABELS experiment)
# The cures: a ZooKeeper lock across all instances, and the two database-only ones.
stockd_integration_test(oversell_zk_3_instances_ends_at_zero
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh zk 3 zero LABELS experiment)
stockd_integration_test(oversell_zk_herd_3_instances_ends_at_zero
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh zk-herd 3 zero LABELS experiment)
stockd_integration_test(oversell_for_update_3_instances_ends_at_zero
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh for-update 3 zero LABELS experiment)
stockd_integration_test(oversell_atomic_3_instances_ends_at_zero
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/oversell.sh atomic 3 zero LABELS experiment)
stockd_integration_test(zk_faults_timeout_paused_holder_zk_down
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/zk_faults.sh LABELS fault)
stockd_integration_test(no_leak_in_10k_requests COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/service/leak_10k.sh)
