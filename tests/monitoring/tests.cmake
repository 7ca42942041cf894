# Tests of monitoring/: the Prometheus rules and the Grafana dashboard (see
# tests/CMakeLists.txt for the helpers). Plain build only, the tests of this block: they
# test the rules, the dashboard and Prometheus; the gauge below runs stockd's /metrics
# under the sanitizers.
if(NOT STOCKD_SANITIZE)
  add_test(NAME monitoring_rules_promtool_check_and_unit_tests
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/rules.sh)
  add_test(NAME monitoring_grafana_dashboard_parses_and_names_real_metrics
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/grafana_dashboard.sh)
  set_tests_properties(monitoring_rules_promtool_check_and_unit_tests
    monitoring_grafana_dashboard_parses_and_names_real_metrics
    PROPERTIES ENVIRONMENT "STOCKD_SRC=${PROJECT_SOURCE_DIR}" LABELS "unit;monitoring" TIMEOUT 60)

  # Prometheus for real, on the shared MariaDB and ZooKeeper: three stockd behind nginx,
  # Prometheus scraping them every second with the rules; a load in zk x3 ends at 0 and
  # the oversell alert stays silent, the same load in none x3 oversells and the alert
  # fires with the table's stock; the recorded series are there, and every metric the
  # Grafana dashboard uses is on a real /metrics or recorded.
  stockd_integration_test(monitoring_prometheus_alert_fires_none_x3_silent_zk_x3
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/prometheus.sh TIMEOUT 120 LABELS monitoring)
endif()

# The gauge itself: the table's stock, not the deduction's; re-read after a restock;
# at most the 1000 most recently served products.
stockd_integration_test(monitoring_stock_gauge_table_truth_1000_products
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stock_gauge.sh TIMEOUT 120 LABELS monitoring)
