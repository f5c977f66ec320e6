// SPDX-License-Identifier: Apache-2.0
#include "device_memory.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>

namespace loom::train {
namespace {

// c10::Stream's native handle where this LibTorch has one (2.x); otherwise
// NULL, which means the default stream below (the trainer never makes
// another current).
template <class S>
auto native_handle(const S& s, int) -> decltype(s.stream_handle()) {
  return s.stream_handle();
}
template <class S>
void* native_handle(const S&, long) {
  return nullptr;
}

// cudaStreamLegacy, without including CUDA: LibTorch's default stream is the
// legacy default stream, whose handle NULL would read as "no stream".
void* const kCudaStreamLegacy = reinterpret_cast<void*>(0x1);

torch::Tensor bytes_at(void* p, size_t bytes, const torch::Device& device) {
  return torch::from_blob(p, {static_cast<int64_t>(bytes)}, torch::TensorOptions().dtype(torch::kByte).device(device));
}

}  // namespace

DLDevice DeviceMemory::dl_device() const {
  if (device_.is_cuda()) return DLDevice{kDLCUDA, static_cast<int32_t>(device_.index())};
  return DLDevice{kDLCPU, 0};
}

void* DeviceMemory::stream() const {
  if (!device_.is_cuda()) return nullptr;
  const c10::Stream s = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device_);
  void* handle = native_handle(s, 0);
  return handle != nullptr ? handle : kCudaStreamLegacy;
}

loom_status DeviceMemory::alloc(size_t bytes, void** ptr) {
  if (ptr == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  *ptr = nullptr;
  if (bytes == 0) return LOOM_OK;
  try {
    torch::Tensor t = torch::empty({static_cast<int64_t>(bytes)}, torch::TensorOptions().dtype(torch::kByte).device(device_));
    *ptr = t.data_ptr();
    blocks_.emplace(*ptr, std::move(t));
    return LOOM_OK;
  } catch (const std::exception&) {
    return LOOM_ERR_SYSTEM;  // out of device memory
  }
}

void DeviceMemory::free(void* ptr) { blocks_.erase(ptr); }

loom_status DeviceMemory::copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) {
  if (bytes == 0) return LOOM_OK;
  if (dst == nullptr || src == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  if (device_.is_cpu() || (!dst_on_device && !src_on_device)) {
    std::memmove(dst, src, bytes);
    return LOOM_OK;
  }
  try {
    const torch::Device cpu(torch::kCPU);
    torch::Tensor to = bytes_at(dst, bytes, dst_on_device ? device_ : cpu);
    const torch::Tensor from = bytes_at(const_cast<void*>(src), bytes, src_on_device ? device_ : cpu);
    to.copy_(from, /*non_blocking=*/false);  // on the current stream; a copy to the host waits for it
    return LOOM_OK;
  } catch (const std::exception&) {
    return LOOM_ERR_INTERNAL;
  }
}

}  // namespace loom::train
