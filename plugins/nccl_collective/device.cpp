// SPDX-License-Identifier: Apache-2.0
// Device selection, buffer checks and scratch memory.
#include "device.h"

#include <cstdio>

#include "error.h"

namespace loom_nccl {

loom_status use_device(int device) {
  const cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess) {
    char what[64];
    std::snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
    return fail_cuda(rc, what);
  }
  return LOOM_OK;
}

loom_status check_device_buffer(const void *ptr, int device, const char *op, const char *which) {
  cudaPointerAttributes attr{};
  const cudaError_t rc = cudaPointerGetAttributes(&attr, ptr);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // an invalid pointer is the caller's: not a sticky error
    attr.type = cudaMemoryTypeUnregistered;
  }
  switch (attr.type) {
    case cudaMemoryTypeManaged: return LOOM_OK;
    case cudaMemoryTypeDevice:
      if (attr.device != device)
        return fail(LOOM_ERR_INVALID_ARGUMENT,
                    "%s: %s is memory of CUDA device %d but the communicator runs on device %d", op, which,
                    attr.device, device);
      return LOOM_OK;
    default:
      return fail(LOOM_ERR_UNSUPPORTED,
                  "%s: %s is host memory; the nccl plugin takes CUDA device memory only (use a host-memory "
                  "collective such as mpi or ucx for it)",
                  op, which);
  }
}

bool has_memory_pools(int device) {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return supported != 0;
}

loom_status scratch_alloc(size_t bytes, cudaStream_t stream, bool pools, void **out) {
  *out = nullptr;
  const cudaError_t rc = pools ? cudaMallocAsync(out, bytes, stream) : cudaMalloc(out, bytes);
  if (rc != cudaSuccess) return fail_cuda(rc, pools ? "cudaMallocAsync" : "cudaMalloc");
  return LOOM_OK;
}

void scratch_free(void *ptr, cudaStream_t stream, bool pools, bool idle_device) {
  if (!ptr) return;
  if (pools) {
    if (cudaFreeAsync(ptr, stream) != cudaSuccess) cudaGetLastError();
  } else if (idle_device) {
    if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
  }
}

}  // namespace loom_nccl
