/* SPDX-License-Identifier: Apache-2.0 */
// The CUDA side of the plugin: selecting the communicator's device on the
// calling thread, telling device buffers from host ones, and stream-ordered
// scratch memory (which, unlike cudaFree, never waits for the whole device,
// where a stuck NCCL kernel of another communicator might be running).
#ifndef LOOM_NCCL_DEVICE_H
#define LOOM_NCCL_DEVICE_H

#include <cuda_runtime_api.h>

#include <cstddef>

#include "loom/plugin.h"

namespace loom_nccl {

// cudaSetDevice(device) on the calling thread: every vtable entry calls it
// before touching CUDA or NCCL, since the host may call from any thread and
// CUDA's current device is per thread.
loom_status use_device(int device);

// LOOM_OK when ptr is CUDA device memory of device (or managed memory);
// LOOM_ERR_UNSUPPORTED for host memory, LOOM_ERR_INVALID_ARGUMENT for
// memory of another device. op and which name the call and the buffer.
loom_status check_device_buffer(const void *ptr, int device, const char *op, const char *which);

// Whether device supports cudaMallocAsync / cudaFreeAsync.
bool has_memory_pools(int device);

// bytes of device memory ordered on stream (cudaMallocAsync), or, without
// memory pools, cudaMalloc.
loom_status scratch_alloc(size_t bytes, cudaStream_t stream, bool pools, void **out);

// Frees scratch_alloc's memory after the work queued on stream so far.
// Without memory pools cudaFree would wait for the whole device, so then
// the memory is freed only when the caller says the device is not stuck
// (idle_device), and leaked otherwise.
void scratch_free(void *ptr, cudaStream_t stream, bool pools, bool idle_device);

}  // namespace loom_nccl

#endif  // LOOM_NCCL_DEVICE_H
