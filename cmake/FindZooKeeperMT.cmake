# Finds libzookeeper_mt, the multi-threaded ZooKeeper C client. Debian ships no .pc file
# for it. Defines the imported target ZooKeeper::mt, which carries -DTHREADED: without
# it zookeeper.h does not declare the synchronous API (zoo_create, zoo_wget, ...).
find_path(ZooKeeperMT_INCLUDE_DIR zookeeper.h PATH_SUFFIXES zookeeper)
find_library(ZooKeeperMT_LIBRARY zookeeper_mt)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ZooKeeperMT
  REQUIRED_VARS ZooKeeperMT_LIBRARY ZooKeeperMT_INCLUDE_DIR)

if(ZooKeeperMT_FOUND AND NOT TARGET ZooKeeper::mt)
  add_library(ZooKeeper::mt UNKNOWN IMPORTED)
  set_target_properties(ZooKeeper::mt PROPERTIES
    IMPORTED_LOCATION "${ZooKeeperMT_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ZooKeeperMT_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS THREADED
    INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
mark_as_advanced(ZooKeeperMT_INCLUDE_DIR ZooKeeperMT_LIBRARY)
