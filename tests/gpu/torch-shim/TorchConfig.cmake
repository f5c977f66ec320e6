# SPDX-License-Identifier: Apache-2.0
# A minimal find_package(Torch) for tests/gpu/run.sh, used only when the
# LibTorch CMake package of the local PyTorch cannot be configured (pip torch's
# TorchConfig wants a full CUDA toolkit with nvcc even though Loom compiles no
# CUDA code). It links the torch Python package's own libraries:
#   -DTorch_DIR=<this folder> -DLOOM_TORCH_ROOT=<torch package folder> -DLOOM_TORCH_CXX11_ABI=0|1
# Defines the imported target `torch`, TORCH_LIBRARIES, TORCH_INCLUDE_DIRS and
# TORCH_CXX_FLAGS as TorchConfig does.
if(NOT LOOM_TORCH_ROOT OR NOT EXISTS "${LOOM_TORCH_ROOT}/lib")
  set(Torch_FOUND FALSE)
  set(Torch_NOT_FOUND_MESSAGE "LOOM_TORCH_ROOT ('${LOOM_TORCH_ROOT}') is not a torch package folder with lib/")
  return()
endif()
set(TORCH_INCLUDE_DIRS "${LOOM_TORCH_ROOT}/include" "${LOOM_TORCH_ROOT}/include/torch/csrc/api/include")
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=${LOOM_TORCH_CXX11_ABI}")
set(_loom_torch_libs)
foreach(lib torch torch_cpu c10)
  find_library(LOOM_TORCH_LIB_${lib} ${lib} PATHS "${LOOM_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  if(NOT LOOM_TORCH_LIB_${lib})
    set(Torch_FOUND FALSE)
    set(Torch_NOT_FOUND_MESSAGE "lib${lib}.so is not in ${LOOM_TORCH_ROOT}/lib")
    return()
  endif()
  list(APPEND _loom_torch_libs "${LOOM_TORCH_LIB_${lib}}")
endforeach()
# The CUDA half: linked even though nothing calls it directly, so that its
# static initialisers register CUDA with ATen (as TorchConfig's --no-as-needed).
foreach(lib torch_cuda c10_cuda)
  find_library(LOOM_TORCH_LIB_${lib} ${lib} PATHS "${LOOM_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  if(LOOM_TORCH_LIB_${lib})
    list(APPEND _loom_torch_libs "-Wl,--no-as-needed,${LOOM_TORCH_LIB_${lib}},--as-needed")
  endif()
endforeach()
if(NOT TARGET torch)
  add_library(torch INTERFACE IMPORTED)
  set_target_properties(torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${LOOM_TORCH_CXX11_ABI}"
    INTERFACE_LINK_LIBRARIES "${_loom_torch_libs}")
endif()
set(TORCH_LIBRARIES torch)
set(TORCH_FOUND TRUE)
set(Torch_FOUND TRUE)
