// SPDX-License-Identifier: Apache-2.0
// The host's device-memory services lent to strategies (SDK ABI 1.6,
// loom_training_state_v1.alloc_device / free_device / copy), on the
// training device and its current stream, through LibTorch: a strategy
// plugin never links CUDA to stage a few bytes.
// Internal; includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <map>

#include "loom/strategy.h"

namespace loom::train {

class DeviceMemory {
 public:
  explicit DeviceMemory(torch::Device device) : device_(device) {}

  // bytes bytes on the device (LibTorch's caching allocator, so ordered on
  // the current stream); *ptr is NULL for 0 bytes.
  loom_status alloc(size_t bytes, void** ptr);
  void free(void* ptr);
  // A blocking copy: returns once the bytes are in dst.
  loom_status copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes);

  torch::Device device() const { return device_; }
  // The DLPack device, and the cudaStream_t the host computes on (the
  // current stream; cudaStreamLegacy for the default one), NULL on the CPU.
  DLDevice dl_device() const;
  void* stream() const;

 private:
  torch::Device device_;
  std::map<void*, torch::Tensor> blocks_;  // what alloc handed out, kept alive until free
};

}  // namespace loom::train
