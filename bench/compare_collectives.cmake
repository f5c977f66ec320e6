# SPDX-License-Identifier: Apache-2.0
# compare_collectives.sh's own binary: LibTorch's c10d::ProcessGroupGloo
# allreduce sweep (the ucx, mpi and ucx_perftest parts need nothing built
# here). Skipped where LibTorch's Gloo headers or libgloo are missing.
find_package(Torch QUIET)
find_path(LOOM_GLOO_INCLUDE_DIR gloo/algorithm.h)
find_library(LOOM_GLOO_LIBRARY gloo)
if(Torch_FOUND AND LOOM_GLOO_INCLUDE_DIR AND LOOM_GLOO_LIBRARY)
  add_executable(compare_gloo_allreduce compare_gloo_allreduce.cpp)
  target_include_directories(compare_gloo_allreduce PRIVATE ${LOOM_GLOO_INCLUDE_DIR})
  target_link_libraries(compare_gloo_allreduce PRIVATE ${TORCH_LIBRARIES} ${LOOM_GLOO_LIBRARY})
else()
  message(STATUS "bench: compare_gloo_allreduce skipped (needs LibTorch with c10d Gloo headers and libgloo)")
endif()
