# Debian packages, one per component, so distributions can ship each backend
# on its own:  cpack -G DEB  (from the build folder)
#   loom               the `loom` command and libloom
#   loom-sdk-dev       C headers, CMake package and loom-sdk.pc for plugin authors
#   loom-plugin-mpi    libmpi_collective.so (depends on Open MPI)
#   loom-plugin-ddp    libddp_strategy.so
set(CPACK_PACKAGE_NAME loom)
set(CPACK_PACKAGE_VENDOR "Loom developers")
set(CPACK_PACKAGE_CONTACT "Loom developers <dev@loom.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_COMPONENTS_ALL runtime sdk plugin-mpi-collective plugin-ddp-strategy)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME loom)
set(CPACK_DEBIAN_SDK_PACKAGE_NAME loom-sdk-dev)
set(CPACK_DEBIAN_SDK_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_SDK_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PLUGIN-MPI-COLLECTIVE_PACKAGE_NAME loom-plugin-mpi)
set(CPACK_DEBIAN_PLUGIN-MPI-COLLECTIVE_PACKAGE_DEPENDS "loom (= ${PROJECT_VERSION}), openmpi-bin")
set(CPACK_DEBIAN_PLUGIN-DDP-STRATEGY_PACKAGE_NAME loom-plugin-ddp)
set(CPACK_DEBIAN_PLUGIN-DDP-STRATEGY_PACKAGE_DEPENDS "loom (= ${PROJECT_VERSION})")
include(CPack)
