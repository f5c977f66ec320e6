# SPDX-License-Identifier: Apache-2.0
# Build flags a distribution expects of every build, so that the Debian
# packages made from any build folder (cpack -G DEB) are hardened and
# reproducible. Included by the top-level CMakeLists.txt after project() and
# before GNUInstallDirs and any target.

# Debian multiarch: libraries go to lib/<triplet> (Debian's ld.so.conf lists
# /usr/local/lib/<triplet> too, so a /usr/local install works the same). Only
# a default: -DCMAKE_INSTALL_LIBDIR=... still wins. GNUInstallDirs does this
# by itself only when the prefix is /usr. A build folder configured before
# this rule holds GNUInstallDirs' plain "lib" default; it is moved once.
if(CMAKE_LIBRARY_ARCHITECTURE AND EXISTS /etc/debian_version AND NOT DEFINED CACHE{LOOM_MULTIARCH_LIBDIR})
  get_property(libdir_help CACHE CMAKE_INSTALL_LIBDIR PROPERTY HELPSTRING)
  if(NOT DEFINED CACHE{CMAKE_INSTALL_LIBDIR}
     OR ("$CACHE{CMAKE_INSTALL_LIBDIR}" STREQUAL "lib" AND libdir_help STREQUAL "Object code libraries (lib)"))
    set(CMAKE_INSTALL_LIBDIR lib/${CMAKE_LIBRARY_ARCHITECTURE} CACHE PATH "Object code libraries (lib/<multiarch>)" FORCE)
  endif()
  set(LOOM_MULTIARCH_LIBDIR ON CACHE INTERNAL "CMAKE_INSTALL_LIBDIR defaulted to lib/<multiarch>")
endif()

# No build path in what is built (debug info, __FILE__ in asserts and log
# locations): both the source and the build folder become ".". The build
# folder is named last so that GCC tries it first when it lies inside the
# source folder. ccache (CCACHE_BASEDIR) still hits across clones.
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-ffile-prefix-map=${PROJECT_SOURCE_DIR}=.>"
                    "$<$<COMPILE_LANGUAGE:C,CXX>:-ffile-prefix-map=${PROJECT_BINARY_DIR}=.>")
# Ninja names sources relative to the build folder: from a build folder
# beside the sources (/x/build and /x/src) that is ../src/..., which the
# absolute maps above miss.
file(RELATIVE_PATH loom_build_to_source ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
string(REGEX REPLACE "/$" "" loom_build_to_source "${loom_build_to_source}")  # CMake may end it with /
# Not for a build folder inside the sources: ../ is then every path's start.
if(loom_build_to_source AND NOT loom_build_to_source MATCHES "^(\\.\\./?)+$")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-ffile-prefix-map=${loom_build_to_source}=.>")
endif()

# Debian's hardening flags, as `DEB_BUILD_MAINT_OPTIONS=hardening=+all
# dpkg-buildflags` gives them on Debian 12 (amd64). Written out rather than
# read from dpkg-buildflags so that every machine builds the same, and so that
# its -ffile-prefix-map of the configuring folder does not leak in.
option(LOOM_HARDENING "Build with Debian's hardening flags (stack protector, fortify, relro, bindnow, PIE)" ON)
if(LOOM_HARDENING)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fstack-protector-strong;-Wformat;-Werror=format-security;-Wdate-time>")
  # _FORTIFY_SOURCE for what is shipped: the targets of core/, plugins/ and
  # sdk/. Not for tests and benchmarks, where glibc's warn_unused_result on
  # system() and friends (active only with fortify) would be errors under
  # LOOM_WERROR. It needs the optimiser: glibc warns without it.
  file(GLOB_RECURSE shipped_lists ${PROJECT_SOURCE_DIR}/core/CMakeLists.txt ${PROJECT_SOURCE_DIR}/core/*/CMakeLists.txt
       ${PROJECT_SOURCE_DIR}/plugins/CMakeLists.txt ${PROJECT_SOURCE_DIR}/plugins/*/CMakeLists.txt
       ${PROJECT_SOURCE_DIR}/sdk/CMakeLists.txt)
  set(shipped_dirs "")
  foreach(list ${shipped_lists})
    get_filename_component(dir ${list} DIRECTORY)
    list(APPEND shipped_dirs ${dir})
  endforeach()
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<NOT:$<CONFIG:Debug>>,$<IN_LIST:$<TARGET_PROPERTY:SOURCE_DIR>,${shipped_dirs}>>:-D_FORTIFY_SOURCE=2>")
  add_link_options("LINKER:-z,relro" "LINKER:-z,now")
  # The `loom` executable is a PIE (Debian's GCC defaults to it; say so anyway):
  # with policy CMP0083 NEW, POSITION_INDEPENDENT_CODE also adds -pie at link.
  include(CheckPIESupported)
  check_pie_supported(LANGUAGES C CXX)
endif()
