# SPDX-License-Identifier: Apache-2.0
# A precompiled <torch/torch.h> for the targets that compile several LibTorch
# translation units. Parsing LibTorch's headers is about half of each such
# unit's compile (76 s for trainer.cpp on 2 cores, 35 s with the header
# precompiled), and each precompiled header costs one such parse (about 80 s)
# and about 0.7 GB in the build folder (-g). A target with one or two LibTorch
# units gains nothing, so only the ones listed get it.
#
# ccache caches units that use a precompiled header, and the header itself,
# only when told that their __DATE__/__TIME__ and -D flags are checked by GCC
# (sloppiness pch_defines,time_macros); the top-level CMakeLists.txt passes
# that to the ccache launcher.
option(LOOM_TORCH_PCH "Precompile LibTorch's header for the targets with many LibTorch sources" ON)

# loom_torch_pch(TARGET SOURCES src...): the listed sources of TARGET use the
# precompiled header; its other sources (no LibTorch) skip it, since loading
# 0.7 GB would only slow them down.
function(loom_torch_pch target)
  cmake_parse_arguments(P "" "" "SOURCES" ${ARGN})
  if(NOT LOOM_TORCH_PCH)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE <torch/torch.h>)
  get_target_property(all ${target} SOURCES)
  get_target_property(dir ${target} SOURCE_DIR)
  set(with)
  foreach(s IN LISTS P_SOURCES)
    get_filename_component(abs ${s} ABSOLUTE BASE_DIR ${dir})
    list(APPEND with ${abs})
  endforeach()
  foreach(s IN LISTS all)
    get_filename_component(abs ${s} ABSOLUTE BASE_DIR ${dir})
    if(NOT abs IN_LIST with AND abs MATCHES "\\.cpp$")
      set_source_files_properties(${s} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()
