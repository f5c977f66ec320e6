# SPDX-License-Identifier: Apache-2.0
# What the SDK needs to know about its headers and its one dependency, read
# from the headers themselves so it can never go stale. Used by the in-tree
# build (sdk/CMakeLists.txt) and, installed next to LoomSDKConfig.cmake, by
# find_package(LoomSDK).

# The DLPack release the SDK is written against: loom/strategy.h includes
# <dlpack/dlpack.h> and uses DLTensor and DLDevice ({kDLCPU, 0}, {kDLCUDA, n}),
# as DLPack 0.6 (Debian 12's and 13's libdlpack-dev) defines them.
set(LOOM_SDK_DLPACK_MIN_VERSION 0.6)

# loom_sdk_abi_version(HEADER MAJOR_VAR MINOR_VAR): LOOM_ABI_MAJOR and
# LOOM_ABI_MINOR as HEADER (loom/plugin.h) defines them.
function(loom_sdk_abi_version header major_var minor_var)
  file(STRINGS "${header}" defines REGEX "^#define LOOM_ABI_(MAJOR|MINOR) +[0-9]+")
  set(major "")
  set(minor "")
  foreach(line IN LISTS defines)
    if(line MATCHES "^#define LOOM_ABI_MAJOR +([0-9]+)")
      set(major ${CMAKE_MATCH_1})
    elseif(line MATCHES "^#define LOOM_ABI_MINOR +([0-9]+)")
      set(minor ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(major STREQUAL "" OR minor STREQUAL "")
    message(FATAL_ERROR "${header} defines no LOOM_ABI_MAJOR and LOOM_ABI_MINOR: not a Loom SDK plugin.h")
  endif()
  set(${major_var} ${major} PARENT_SCOPE)
  set(${minor_var} ${minor} PARENT_SCOPE)
endfunction()

# loom_sdk_dlpack_version(HEADER VAR): the release of a dlpack/dlpack.h,
# "0.6" (DLPACK_VERSION 60; 0.5 and older wrote 050) or "1.1"
# (DLPACK_MAJOR_VERSION and DLPACK_MINOR_VERSION, from 1.0); empty if neither.
function(loom_sdk_dlpack_version header var)
  file(STRINGS "${header}" defines REGEX "^#define DLPACK_(VERSION|MAJOR_VERSION|MINOR_VERSION) +[0-9]+")
  set(version "")
  set(major "")
  set(minor "")
  foreach(line IN LISTS defines)
    if(line MATCHES "^#define DLPACK_VERSION +0*([0-9]+)")
      math(EXPR tenths "${CMAKE_MATCH_1} / 10")
      set(version 0.${tenths})
    elseif(line MATCHES "^#define DLPACK_MAJOR_VERSION +([0-9]+)")
      set(major ${CMAKE_MATCH_1})
    elseif(line MATCHES "^#define DLPACK_MINOR_VERSION +([0-9]+)")
      set(minor ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(NOT major STREQUAL "" AND NOT minor STREQUAL "")
    set(version ${major}.${minor})
  endif()
  set(${var} "${version}" PARENT_SCOPE)
endfunction()

# loom_sdk_find_dlpack(): finds the DLPack headers loom/strategy.h includes,
# through DLPack's CMake package (dlpackConfig.cmake, which libdlpack-dev
# ships) or else as a folder holding dlpack/dlpack.h (also where the
# compiler's CPATH points). The cache entry LoomSDK_DLPACK_INCLUDE_DIR may
# name that folder outright. Sets LoomSDK_DLPACK_INCLUDE_DIR,
# LoomSDK_DLPACK_VERSION, and LoomSDK_DLPACK_ERROR: empty when DLPack was
# found and is recent enough, else what is wrong and what to install.
# (DLPack's package states no usable version, 0.1.0 in Debian's 0.6, so the
# version is read from the header.)
function(loom_sdk_find_dlpack)
  string(CONCAT install_hint "install DLPack ${LOOM_SDK_DLPACK_MIN_VERSION} or newer: the Debian and Ubuntu "
                "package libdlpack-dev, elsewhere https://github.com/dmlc/dlpack (its CMake package or headers under "
                "CMAKE_PREFIX_PATH), or set LoomSDK_DLPACK_INCLUDE_DIR to the folder that holds dlpack/dlpack.h")
  if(NOT LoomSDK_DLPACK_INCLUDE_DIR)
    find_package(dlpack CONFIG QUIET)
    if(TARGET dlpack::dlpack)
      get_target_property(dirs dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
      foreach(dir IN LISTS dirs)
        if(EXISTS "${dir}/dlpack/dlpack.h")
          set(LoomSDK_DLPACK_INCLUDE_DIR "${dir}" CACHE PATH "Folder holding dlpack/dlpack.h (DLPack >= ${LOOM_SDK_DLPACK_MIN_VERSION})")
          break()
        endif()
      endforeach()
    endif()
  endif()
  find_path(LoomSDK_DLPACK_INCLUDE_DIR dlpack/dlpack.h
            HINTS ENV CPATH ENV C_INCLUDE_PATH ENV CPLUS_INCLUDE_PATH
            DOC "Folder holding dlpack/dlpack.h (DLPack >= ${LOOM_SDK_DLPACK_MIN_VERSION})")
  set(error "")
  set(version "")
  if(NOT LoomSDK_DLPACK_INCLUDE_DIR OR NOT EXISTS "${LoomSDK_DLPACK_INCLUDE_DIR}/dlpack/dlpack.h")
    set(error "loom/strategy.h includes <dlpack/dlpack.h> but no DLPack headers were found: ${install_hint}.")
  else()
    loom_sdk_dlpack_version("${LoomSDK_DLPACK_INCLUDE_DIR}/dlpack/dlpack.h" version)
    if(version STREQUAL "")
      string(CONCAT error "${LoomSDK_DLPACK_INCLUDE_DIR}/dlpack/dlpack.h states no DLPack version "
                   "(DLPACK_VERSION or DLPACK_MAJOR_VERSION): ${install_hint}.")
    elseif(version VERSION_LESS LOOM_SDK_DLPACK_MIN_VERSION)
      string(CONCAT error "${LoomSDK_DLPACK_INCLUDE_DIR}/dlpack/dlpack.h is DLPack ${version}, older than "
                   "${LOOM_SDK_DLPACK_MIN_VERSION}, which the Loom SDK is written against: ${install_hint}.")
    endif()
  endif()
  set(LoomSDK_DLPACK_INCLUDE_DIR "${LoomSDK_DLPACK_INCLUDE_DIR}" PARENT_SCOPE)
  set(LoomSDK_DLPACK_VERSION "${version}" PARENT_SCOPE)
  set(LoomSDK_DLPACK_ERROR "${error}" PARENT_SCOPE)
endfunction()
