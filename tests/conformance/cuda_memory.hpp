// SPDX-License-Identifier: Apache-2.0
// cuda_memory.hpp: CUDA managed memory for `--device cuda`, through the CUDA
// runtime loaded at run time (dlopen), so the suite links no CUDA. Managed
// memory is device memory a collective may use and the host may read and
// write, so every case's checks stay as they are. Where the runtime, the
// driver or a device is missing, probe() says why and every case skips.
//
// Thread safety: probe() on the main thread first; the rest from any thread.
#pragma once

#include <cstddef>
#include <string>

namespace conformance::cuda {

// Loads the runtime and makes device `device` current: "" on success, else
// why CUDA memory cannot be had here (the runtime's own words).
std::string probe(int device);
// The number of devices probe() saw.
int device_count();
// bytes of managed memory; throws std::runtime_error naming the CUDA error.
void* alloc_managed(size_t bytes);
void free_managed(void* p);
// Waits for all work on the device (before the host reads what a kernel wrote).
void synchronize();

}  // namespace conformance::cuda
