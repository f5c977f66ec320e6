# SPDX-License-Identifier: Apache-2.0
# Debian packages, one per component, so distributions can ship each backend
# on its own:  cpack -G DEB  (from the build folder)
#   loom               the `loom` command and its private libloom
#   loom-sdk-dev       C headers, CMake package and loom-sdk.pc for plugin authors
#   libloom-dev        libloom's C++ API for compiled tasks (tied to the LibTorch it was built with)
#   loom-plugin-mpi    libmpi_collective.so (depends on Open MPI)
#   loom-plugin-ddp    libddp_strategy.so
#   loom-plugin-ucx    libucx_collective.so (depends on UCX)
#   loom-plugin-collab libcollab_strategy.so (depends on OpenDHT; averages over loom-plugin-ucx)
#   loom-plugin-nccl   libnccl_collective.so, when CUDA and NCCL were found (not Debian packages here)
# A plugin whose target this build has not made (LOOM_PLUGINS, CUDA missing)
# has no package. tests/scripts/packages.sh (ctest packaging.debs) checks the
# result with lintian and by running the unpacked `loom`.
#
# libloom is a PRIVATE library: /usr/lib/<triplet>/loom/libloom.so.0, found by
# /usr/bin/loom through a RUNPATH of exactly that folder ($ORIGIN-relative).
# Not a public libloom0 because:
#  - its only users are Loom's own: the `loom` command, and C++ tasks that
#    `loom train` loads into itself (task_library), where libloom is already
#    loaded. Nothing else should link it, and its C++ ABI changes with every
#    LibTorch it is built against (README), which a public SONAME would have
#    to promise to track (a new libloomN package per LibTorch transition);
#  - a public library needs a package of its own, libloom0, but the install
#    component `runtime` must hold both `loom` and libloom: tests
#    (tests/scripts/cpp_task.sh) and users install it alone with
#    `cmake --install --component runtime` and run bin/loom from there.
# So no shlibs file and no ldconfig trigger are needed (ld.so never looks in
# the folder), and libloom-dev's libloom.so link and LoomConfig.cmake point
# into the private folder. Plugins are found relative to libloom
# (core/src/plugin_path.cpp: <folder of libloom>/plugins), hence
# /usr/lib/<triplet>/loom/plugins.
#
# Binaries are stripped and their debug info left out: CPack's own -dbgsym
# packages (CPACK_DEBIAN_DEBUGINFO_PACKAGE, CMake 3.25) carry no copyright
# file nor changelog (lintian errors no-copyright-file, no-changelog) and no
# md5sums of the .debug files, and install() cannot add files to them. The
# build tree keeps full debug info. Build paths are mapped away at compile
# time all the same (packaging/BuildFlags.cmake).

# The Debian revision comes from the newest entry of packaging/changelog,
# whose upstream part must be the project's version.
set(LOOM_DEB_CHANGELOG ${PROJECT_SOURCE_DIR}/packaging/changelog)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${LOOM_DEB_CHANGELOG})
file(STRINGS ${LOOM_DEB_CHANGELOG} changelog_head LIMIT_COUNT 1)
file(STRINGS ${LOOM_DEB_CHANGELOG} changelog_date REGEX "^ -- " LIMIT_COUNT 1)
if(NOT changelog_head MATCHES "^loom \\(([^)-]+)-([^)]+)\\) ")
  message(FATAL_ERROR "${LOOM_DEB_CHANGELOG}: the first line is not 'loom (VERSION-REVISION) ...': ${changelog_head}")
endif()
set(LOOM_DEB_RELEASE ${CMAKE_MATCH_2})
if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(WARNING "${LOOM_DEB_CHANGELOG}: the newest entry is for ${CMAKE_MATCH_1}, the project is ${PROJECT_VERSION}: "
                  "add an entry 'loom (${PROJECT_VERSION}-1)' before packaging")
endif()
set(LOOM_DEB_VERSION ${PROJECT_VERSION}-${LOOM_DEB_RELEASE})
# The man page's date: the changelog entry's, so every build writes the same page.
string(REGEX MATCH "[0-9]+ [A-Z][a-z][a-z] [0-9][0-9][0-9][0-9]" changelog_day "${changelog_date}")
string(REPLACE " " ";" changelog_day "${changelog_day}")
list(GET changelog_day 0 day)
list(GET changelog_day 1 month)
list(GET changelog_day 2 year)
set(months Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec)
list(FIND months "${month}" month)
if(month LESS 0)
  message(FATAL_ERROR "${LOOM_DEB_CHANGELOG}: no date in the newest entry's trailer line: ${changelog_date}")
endif()
math(EXPR month "${month} + 1")
string(LENGTH "${day}" len)
if(len EQUAL 1)
  set(day 0${day})
endif()
if(month LESS 10)
  set(month 0${month})
endif()
set(LOOM_DEB_DATE ${year}-${month}-${day})

# Components, their packages, and what each says of itself. The first line
# of a description is the package's synopsis (lowercase, no final full stop).
# No semicolons: they would split the text (a CMake list).
function(loom_deb_package component package)
  cmake_parse_arguments(P "" "SECTION" "DESCRIPTION" ${ARGN})
  string(TOUPPER ${component} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${package} PARENT_SCOPE)
  list(JOIN P_DESCRIPTION "\n" description)
  set(CPACK_DEBIAN_${C}_DESCRIPTION "${description}" PARENT_SCOPE)
  if(P_SECTION)
    set(CPACK_DEBIAN_${C}_PACKAGE_SECTION ${P_SECTION} PARENT_SCOPE)
  endif()
  set(loom_components ${loom_components} ${component} PARENT_SCOPE)
  # Every package carries the copyright file and the changelog.
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/copyright ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
endfunction()

set(loom_components "")
loom_deb_package(runtime loom
  DESCRIPTION
  "training runtime for LibTorch with plugin strategies and collectives"
  "Loom trains LibTorch models (TorchScript modules, or tasks compiled in"
  "C++) on one process, with synchronous data parallelism over MPI, UCX or"
  "NCCL, or collaboratively across machines that join and leave at will."
  "How training is distributed is a plugin: strategies and collective"
  "backends are shared objects loaded at run time through a stable C ABI,"
  "each in a package of its own (loom-plugin-*)."
  "."
  "This package holds the `loom` command (train, launch, plugins, bench,"
  "swarm), its private library libloom with the built-in tasks and the"
  "`single` strategy, the manual page and example configs. The `digits`"
  "task reads the data set that python3-sklearn ships.")
# Not Architecture: all: the CMake package and loom-sdk.pc live in, and name,
# the multiarch folders (pluginsdir is /usr/lib/<triplet>/loom/plugins).
loom_deb_package(sdk ${LOOM_SDK_PACKAGE} SECTION libdevel
  DESCRIPTION
  "C headers for building Loom collective and strategy plugins"
  "The Loom SDK is the stable C ABI (C99 headers) between the Loom runtime"
  "and its plugins: entry points and version negotiation, the collective"
  "and strategy tables, status codes and the services the host lends a"
  "plugin. Nothing to link: a plugin is one shared object exporting one"
  "symbol."
  "."
  "This package holds the headers, the CMake package LoomSDK with"
  "loom_sdk_add_plugin(), the linker version script and loom-sdk.pc, whose"
  "pluginsdir variable names where the installed runtime looks for plugins,"
  "a guide to writing a backend (README.md) and a complete example plugin"
  "in C. Strategy plugins see tensors through DLPack (libdlpack-dev).")
loom_deb_package(cpp-dev libloom-dev SECTION libdevel
  DESCRIPTION
  "C++ API of Loom for tasks compiled against libloom"
  "Loom trains LibTorch models. Besides TorchScript files, a task may be a"
  "shared library written in C++ that registers itself with libloom and is"
  "loaded by `loom train` ([trainer] task_library)."
  "."
  "This package holds libloom's C++ headers, the libloom.so link and the"
  "CMake package Loom (find_package(Loom), target Loom::loom). The C++ API"
  "is tied to the LibTorch version libloom was built with: rebuild a task"
  "library whenever either changes. Plugins use loom-sdk-dev instead.")

# name_kind target -> package, extra Depends, description.
set(plugin_mpi_collective_package loom-plugin-mpi)
set(plugin_mpi_collective_depends "openmpi-bin")
set(plugin_mpi_collective_description
  "Open MPI collective plugin for Loom"
  "Loom trains LibTorch models with distribution strategies and collective"
  "backends that are plugins. This package holds libmpi_collective.so, the"
  "collective `mpi`: every collective operation over Open MPI, on host"
  "memory, for jobs started with mpirun. The `ddp` strategy uses it by"
  "default.")
set(plugin_ucx_collective_package loom-plugin-ucx)
set(plugin_ucx_collective_depends "")
set(plugin_ucx_collective_description
  "UCX collective plugin for Loom, failure-aware with dynamic groups"
  "Loom trains LibTorch models with distribution strategies and collective"
  "backends that are plugins. This package holds libucx_collective.so, the"
  "collective `ucx`: ring, tree and recursive-doubling algorithms over UCX"
  "(UCP) on host memory, with timeouts and abort, so a dead peer ends an"
  "operation instead of hanging it. It is the only collective that forms"
  "groups on the fly, which the `collab` strategy needs. Static jobs use it"
  "through `loom launch`.")
set(plugin_nccl_collective_package loom-plugin-nccl)
set(plugin_nccl_collective_depends "")
set(plugin_nccl_collective_description
  "NVIDIA NCCL collective plugin for Loom (CUDA device memory)"
  "Loom trains LibTorch models with distribution strategies and collective"
  "backends that are plugins. This package holds libnccl_collective.so, the"
  "collective `nccl`: every collective operation on CUDA device memory over"
  "NCCL's non-blocking communicators, with a watchdog for dead peers and"
  "deadlines."
  "."
  "It needs the CUDA runtime (libcudart) and NCCL (libnccl.so.2), which no"
  "Debian package provides here: install them from NVIDIA (e.g. under"
  "/usr/local/cuda, on the dynamic linker's path). Without them, or without"
  "a GPU and its driver, `loom plugins` lists it as unavailable with the"
  "reason.")
set(plugin_ddp_strategy_package loom-plugin-ddp)
set(plugin_ddp_strategy_depends "")
set(plugin_ddp_strategy_description
  "data-parallel strategy plugin for Loom"
  "Loom trains LibTorch models with distribution strategies and collective"
  "backends that are plugins. This package holds libddp_strategy.so, the"
  "strategy `ddp`: synchronous data parallelism that broadcasts rank 0's"
  "parameters and averages gradients in buckets with non-blocking"
  "allreduces over any collective plugin (mpi by default, ucx, nccl).")
set(plugin_collab_strategy_package loom-plugin-collab)
set(plugin_collab_strategy_depends "loom-plugin-ucx (= ${LOOM_DEB_VERSION})")
set(plugin_collab_strategy_description
  "collaborative training strategy plugin for Loom"
  "Loom trains LibTorch models with distribution strategies and collective"
  "backends that are plugins. This package holds libcollab_strategy.so, the"
  "strategy `collab`: one model trained across unreliable, heterogeneous"
  "machines that join and leave at will (spot instances, volunteers)."
  "Peers find each other and their progress over OpenDHT, average in"
  "groups formed each round through the `ucx` collective, and a joining"
  "peer downloads the swarm's state. A swarm key admits only its holders."
  "It also holds the observer behind `loom swarm status`, which shows a"
  "running swarm's peers, rate, loss and rounds without training.")

# Every plugin target loom_add_plugin() made and installs (cmake/LoomPlugin.cmake).
set(loom_suggests python3-sklearn)
get_property(loom_plugin_targets GLOBAL PROPERTY LOOM_PLUGIN_TARGETS)
foreach(target ${loom_plugin_targets})
  get_target_property(component ${target} LOOM_INSTALL_COMPONENT)
  if(NOT DEFINED plugin_${target}_package)
    # A plugin folder this file does not describe yet gets a package all the same.
    message(AUTHOR_WARNING "packaging/CPackConfig.cmake has no description of plugin ${target}: add one")
    string(REGEX REPLACE "_[a-z]+$" "" name ${target})
    string(REPLACE "_" "-" name ${name})
    set(plugin_${target}_package loom-plugin-${name})
    set(plugin_${target}_description "${target} plugin for Loom"
      "Loom trains LibTorch models with distribution strategies and collective"
      "backends that are plugins. This package holds lib${target}.so.")
  endif()
  loom_deb_package(${component} ${plugin_${target}_package} DESCRIPTION ${plugin_${target}_description})
  string(TOUPPER ${component} C)
  set(depends "loom (= ${LOOM_DEB_VERSION})")
  if(plugin_${target}_depends)
    string(APPEND depends ", ${plugin_${target}_depends}")
  endif()
  set(CPACK_DEBIAN_${C}_PACKAGE_DEPENDS "${depends}")
  list(APPEND loom_suggests ${plugin_${target}_package})
endforeach()
if(TARGET collab_strategy AND NOT TARGET ucx_collective)
  message(WARNING "loom-plugin-collab depends on loom-plugin-ucx, which this build does not make (LOOM_PLUGINS)")
endif()

# The Python package (python/), when the build made it.
if(TARGET loom_python_native)
  loom_deb_package(python python3-loom SECTION python
    DESCRIPTION
    "Python interface to Loom: a swarm optimizer for PyTorch training loops"
    "Loom trains one model across unreliable machines that join and leave at"
    "will. This package brings that to any PyTorch training loop:"
    "loom.Optimizer wraps a torch.optim optimizer (SGD, Adam, AdamW) and"
    "averages with the swarm through the same collab strategy plugin that"
    "`loom train` peers run, so Python and C++ peers train one model"
    "together. loom.Communicator gives Python the collective plugins'"
    "allreduce, broadcast and barrier on torch tensors, and loom.plugins()"
    "lists the plugins found.")
  # The extension is built for this Python and this LibTorch (python3-torch
  # uses the libtorch that libloom links).
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "loom (= ${LOOM_DEB_VERSION}), python3-torch, python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${LOOM_PYTHON_NEXT_MINOR})")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "loom-plugin-collab")
endif()

set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "${loom_suggests}")
list(JOIN CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS ", " CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS)
set(CPACK_DEBIAN_CPP-DEV_PACKAGE_DEPENDS
    "loom (= ${LOOM_DEB_VERSION}), loom-sdk-dev (= ${LOOM_DEB_VERSION}), libtorch-dev")
set(CPACK_DEBIAN_CPP-DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_SDK_PACKAGE_SHLIBDEPS OFF)
# loom/strategy.h includes <dlpack/dlpack.h>; LoomSDKConfig.cmake finds it
# and refuses DLPack older than cmake/LoomSDKChecks.cmake's minimum.
set(CPACK_DEBIAN_SDK_PACKAGE_DEPENDS "libdlpack-dev (>= ${LOOM_SDK_DLPACK_MIN_VERSION})")

# Files of the runtime package besides the binaries: example configs, and
# the manual page, written from the built `loom`'s --help texts.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/configs/ DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/loom/examples
        COMPONENT runtime FILES_MATCHING PATTERN "*.toml")
set(loom_man ${PROJECT_BINARY_DIR}/packaging/loom.1)
# `loom swarm status --help` runs the collab plugin's observer, so the page
# waits for it; a build without that plugin says where the command comes from.
if(TARGET loom_swarm_status)
  set(loom_man_observer loom_swarm_status)
  set(loom_man_skip "")
else()
  set(loom_man_observer "")
  set(loom_man_skip "swarm status")
endif()
add_custom_command(OUTPUT ${loom_man}.gz
  # The paths the page names are those of the Debian package (prefix /usr).
  COMMAND ${CMAKE_COMMAND} -E env "LOOM_MANPAGE_SKIP=${loom_man_skip}"
          ${PROJECT_SOURCE_DIR}/packaging/loom-manpage.sh $<TARGET_FILE:loom> ${PROJECT_VERSION} ${LOOM_DEB_DATE}
          /usr/${LOOM_PLUGIN_INSTALL_DIR} /usr/${CMAKE_INSTALL_DATAROOTDIR}/doc/loom/examples > ${loom_man}
  COMMAND gzip -9nf ${loom_man}
  DEPENDS loom ${loom_man_observer} ${PROJECT_SOURCE_DIR}/packaging/loom-manpage.sh
  COMMENT "Writing the manual page loom.1 from loom --help"
  VERBATIM)
add_custom_target(loom_manpage ALL DEPENDS ${loom_man}.gz)
install(FILES ${loom_man}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)
# changelog.Debian.gz, as dpkg-deb and lintian expect it: gzip -9n (no name, no time stamp).
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/packaging)
execute_process(COMMAND gzip -9nc ${LOOM_DEB_CHANGELOG} OUTPUT_FILE ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz
                RESULT_VARIABLE gzip_result)
if(NOT gzip_result EQUAL 0)
  message(FATAL_ERROR "gzip -9nc ${LOOM_DEB_CHANGELOG} failed: ${gzip_result}")
endif()

set(CPACK_PACKAGE_NAME loom)
set(CPACK_PACKAGE_VENDOR "Loom developers")
set(CPACK_PACKAGE_CONTACT "Loom developers <dev@loom.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${LOOM_DEB_RELEASE})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps runs in each package's staging root: libloom is in the
# package itself (loom's RUNPATH would find it too). CUDA and NCCL come from
# no Debian package: their folders let dpkg-shlibdeps find them even when the
# dynamic linker's path lacks them, and CPack's --ignore-missing-info then
# leaves them out of loom-plugin-nccl's Depends (its description says so).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS usr/${LOOM_PRIVATE_LIBDIR})
# python3-loom's extension needs libloom, which is loom's, not in its root:
# found in the build tree, and --ignore-missing-info leaves it to the stated
# Depends on loom.
if(TARGET loom_python_native)
  list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
endif()
if(TARGET nccl_collective)
  # (Cache entries of plugins/nccl_collective and FindCUDAToolkit.)
  foreach(lib "${LOOM_NCCL_LIBRARY}" "${CUDA_CUDART}")
    get_filename_component(dir "${lib}" DIRECTORY)
    list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${dir})
  endforeach()
  list(REMOVE_DUPLICATES CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS)
endif()
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_COMPONENTS_ALL ${loom_components})
# Each package's own synopsis (see there).
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/packaging/CPackProjectConfig.cmake)

# Stripped (see the top of this file for why there are no -dbgsym packages).
set(CPACK_STRIP_FILES ON)
include(CPack)
