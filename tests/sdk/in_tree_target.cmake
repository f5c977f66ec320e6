# SPDX-License-Identifier: Apache-2.0
# ctest sdk.in_tree_target: the in-tree Loom::sdk (sdk/CMakeLists.txt) gives
# its users the folders of both headers it needs: loom/plugin.h and, for
# loom/strategy.h, the DLPack that configure found.
#   cmake -DINCLUDES=<dirs joined by |> -DDLPACK=<LoomSDK_DLPACK_INCLUDE_DIR> -DSDK=<sdk/include> -P in_tree_target.cmake
cmake_minimum_required(VERSION 3.22)
string(REPLACE "|" ";" includes "${INCLUDES}")
foreach(wanted IN ITEMS "${SDK}" "${DLPACK}")
  if(NOT wanted IN_LIST includes)
    message(FATAL_ERROR "Loom::sdk's include directories (${includes}) lack ${wanted}")
  endif()
endforeach()
if(NOT EXISTS "${DLPACK}/dlpack/dlpack.h")
  message(FATAL_ERROR "${DLPACK} has no dlpack/dlpack.h")
endif()
message(STATUS "Loom::sdk includes ${SDK} and DLPack's ${DLPACK}")
