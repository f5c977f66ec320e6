# SPDX-License-Identifier: Apache-2.0
# loom_runpath(TARGET [BUILD entries...] [DESTINATION dir COMPONENT c [INSTALLED entries...]])
#
# Gives an installed target a RUNPATH without an empty entry, in the build
# tree as installed. An empty entry means the current folder to ld.so: a
# libspdlog.so.1.10 lying in the folder `loom --version` ran from was loaded.
#
# CMake's own way leaves one: the build-tree RUNPATH of a target it will
# rewrite at install time ends in ':' padding (room for the install RUNPATH,
# and one ':' always). So the target is built with its final build-tree
# RUNPATH (BUILD_WITH_INSTALL_RPATH): BUILD, then the folders of the
# libraries it links from outside the project and outside the linker's own
# folders (INSTALL_RPATH_USE_LINK_PATH), which CMake's build-tree RUNPATH had.
# The installed copy is then set to exactly INSTALLED, or has no RUNPATH at
# all; INSTALLED must not be longer than the build-tree RUNPATH (the string
# is rewritten in place), so BUILD lists it too.
function(loom_runpath target)
  cmake_parse_arguments(R "" "DESTINATION;COMPONENT" "BUILD;INSTALLED" ${ARGN})
  set_target_properties(${target} PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH_USE_LINK_PATH ON
                        INSTALL_RPATH "${R_BUILD}")
  if(NOT R_DESTINATION)
    return()
  endif()
  set(file "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${R_DESTINATION}/$<TARGET_FILE_NAME:${target}>")
  if(R_INSTALLED)
    list(JOIN R_INSTALLED ":" installed)
    install(CODE "file(RPATH_SET FILE \"${file}\" NEW_RPATH \"${installed}\")" COMPONENT ${R_COMPONENT})
  else()
    install(CODE "file(RPATH_REMOVE FILE \"${file}\")" COMPONENT ${R_COMPONENT})
  endif()
endfunction()
