# Tests of packaging/ (see tests/CMakeLists.txt for the helpers): no servers. The unit
# test is skipped without systemd-analyze, the man page test without help2man.
set(PKG_MAN ${PROJECT_BINARY_DIR}/packaging/stockd.1)
add_test(NAME packaging_systemd_unit_verifies
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/packaging.sh unit $<TARGET_FILE:stockd>
          ${PROJECT_BINARY_DIR}/packaging/stockd@.service ${PKG_MAN})
add_test(NAME packaging_man_page_names_every_option
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/packaging.sh man $<TARGET_FILE:stockd> ${PKG_MAN})
# cmake --install into a temporary prefix: bin/stockd and bin/stock-writer, the man pages
# and the unit.
add_test(NAME packaging_install_puts_bin_man_and_unit
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/packaging.sh install ${PROJECT_BINARY_DIR})
# The example environment file names only variables of stockd's option table.
add_test(NAME packaging_env_example_keys_are_options
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/packaging.sh env $<TARGET_FILE:stockd>
          ${PROJECT_SOURCE_DIR}/packaging/stockd.env.example)
set_tests_properties(packaging_systemd_unit_verifies packaging_man_page_names_every_option
  packaging_install_puts_bin_man_and_unit packaging_env_example_keys_are_options
  PROPERTIES LABELS "unit;packaging" TIMEOUT 60 SKIP_RETURN_CODE 77)
