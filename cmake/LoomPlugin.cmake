# SPDX-License-Identifier: Apache-2.0
# loom_add_plugin(NAME KIND SOURCES ... [LIBRARIES ...] [COMPONENT c])
# Builds lib<NAME>_<KIND>.so into the build tree's plugin folder with only
# its entry symbol exported, and installs it into <libdir>/loom/plugins.
include(${CMAKE_CURRENT_LIST_DIR}/LoomRunpath.cmake)  # loom_runpath
set(LOOM_PLUGIN_MAP_DEFAULT ${CMAKE_CURRENT_LIST_DIR}/plugin.map)
function(loom_add_plugin name kind)
  cmake_parse_arguments(P "NO_INSTALL" "COMPONENT;OUTPUT_DIR;MAP" "SOURCES;LIBRARIES" ${ARGN})
  set(target ${name}_${kind})
  if(NOT P_OUTPUT_DIR)
    set(P_OUTPUT_DIR ${LOOM_PLUGIN_OUTPUT_DIR})
  endif()
  if(NOT P_MAP)
    set(P_MAP ${LOOM_PLUGIN_MAP_DEFAULT})
  endif()
  add_library(${target} MODULE ${P_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR}
    LINK_DEPENDS ${P_MAP})
  target_link_libraries(${target} PRIVATE Loom::sdk ${P_LIBRARIES})
  target_link_options(${target} PRIVATE "LINKER:--version-script=${P_MAP}" "LINKER:-z,defs")
  if(NOT P_NO_INSTALL)
    if(NOT P_COMPONENT)
      set(P_COMPONENT plugin-${name}-${kind})
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION ${LOOM_PLUGIN_INSTALL_DIR} COMPONENT ${P_COMPONENT})
    # No RUNPATH once installed; in the build tree the folders of what it
    # links from outside the system's (Open MPI's, CUDA's), with no empty entry.
    loom_runpath(${target} DESTINATION ${LOOM_PLUGIN_INSTALL_DIR} COMPONENT ${P_COMPONENT})
    # packaging/CPackConfig.cmake makes one package of each.
    set_target_properties(${target} PROPERTIES LOOM_INSTALL_COMPONENT ${P_COMPONENT})
    set_property(GLOBAL APPEND PROPERTY LOOM_PLUGIN_TARGETS ${target})
  endif()
endfunction()
