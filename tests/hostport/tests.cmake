# Tests of hostport/ (the one HOST:PORT and address-list parser): pure, no server.
stockd_unit_test(hostport_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hostport.c LIBS hostport)
