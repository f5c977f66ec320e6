// SPDX-License-Identifier: Apache-2.0
// cuda_memory.cpp: the few CUDA runtime functions the suite needs, by dlsym.
#include "cuda_memory.hpp"

#include <dlfcn.h>

#include <stdexcept>

namespace conformance::cuda {
namespace {

// The runtime's types, reduced to what these calls pass (cudaError_t is an
// int enum, 0 = cudaSuccess; cudaMemAttachGlobal = 1).
using Err = int;
struct Api {
  Err (*get_device_count)(int*) = nullptr;
  Err (*set_device)(int) = nullptr;
  Err (*malloc_managed)(void**, size_t, unsigned) = nullptr;
  Err (*free)(void*) = nullptr;
  Err (*device_synchronize)() = nullptr;
  const char* (*get_error_string)(Err) = nullptr;
  int devices = 0;
  bool ready = false;
};

Api& api() {
  static Api a;
  return a;
}

std::string error_text(Err e) {
  const char* s = api().get_error_string ? api().get_error_string(e) : nullptr;
  return std::string(s ? s : "unknown CUDA error") + " (cudaError " + std::to_string(e) + ")";
}

// The runtime a CUDA LibTorch already loaded, else one found by name.
void* open_runtime(std::string* why) {
  const char* names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
#ifdef LOOM_CUDART_DIR
                         LOOM_CUDART_DIR "/libcudart.so",
#endif
  };
  for (const char* name : names)
    if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return h;
  std::string errors;
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    errors += (errors.empty() ? "" : "; ") + std::string(dlerror());
  }
  *why = "no CUDA runtime could be loaded (" + errors + ")";
  return nullptr;
}

template <class F>
bool bind(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  return *out != nullptr;
}

}  // namespace

std::string probe(int device) {
  Api& a = api();
  std::string why;
  void* h = open_runtime(&why);
  if (!h) return why;
  if (!bind(h, "cudaGetDeviceCount", &a.get_device_count) || !bind(h, "cudaSetDevice", &a.set_device) ||
      !bind(h, "cudaMallocManaged", &a.malloc_managed) || !bind(h, "cudaFree", &a.free) ||
      !bind(h, "cudaDeviceSynchronize", &a.device_synchronize) || !bind(h, "cudaGetErrorString", &a.get_error_string))
    return "the CUDA runtime lacks a function the suite needs (" + std::string(dlerror()) + ")";
  Err e = a.get_device_count(&a.devices);
  if (e != 0) return "cudaGetDeviceCount: " + error_text(e);
  if (a.devices == 0) return "no CUDA device is visible to this process";
  if (device >= a.devices)
    return "device " + std::to_string(device) + " was asked for, but this process sees " + std::to_string(a.devices) +
           " CUDA device(s)";
  e = a.set_device(device);
  if (e != 0) return "cudaSetDevice(" + std::to_string(device) + "): " + error_text(e);
  a.ready = true;
  return "";
}

int device_count() { return api().devices; }

void* alloc_managed(size_t bytes) {
  if (!api().ready) throw std::runtime_error("CUDA memory asked for before a successful probe");
  void* p = nullptr;
  const Err e = api().malloc_managed(&p, bytes == 0 ? 1 : bytes, /*cudaMemAttachGlobal=*/1);
  if (e != 0) throw std::runtime_error("cudaMallocManaged(" + std::to_string(bytes) + "): " + error_text(e));
  return p;
}

void free_managed(void* p) {
  if (p && api().ready) api().free(p);
}

void synchronize() {
  if (api().ready) api().device_synchronize();
}

}  // namespace conformance::cuda
