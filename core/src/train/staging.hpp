// SPDX-License-Identifier: Apache-2.0
// Host staging (SDK ABI 1.6, LOOM_CAP_DEVICE_MEMORY): what a strategy that
// works only on host memory (a swarm peer) is lent when the model trains
// on a device. It holds a host copy of the parameters, the gradients (in
// flat buffers laid out as the device's, so buckets stay contiguous), the
// floating-point buffers and, while lent, the optimizer's statistics; the
// trainer calls pull() before every call into the strategy and push() after
// it, so the strategy reads and changes the training state as if it lived
// in host memory. Snapshots and restores the strategy asks for go through
// the device state, kept in step with the copies.
// Internal; includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "loom/strategy.h"
#include "state.hpp"

namespace loom::train {

class HostStaging {
 public:
  // Copies the state once; state must outlive this object.
  explicit HostStaging(TrainingState& state);
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // The view to lend: host tensors, device {kDLCPU, 0}, no stream.
  const loom_training_state_v1& abi_view() const { return view_; }
  // Device to host: parameters, gradients, buffers. Drops the optimizer
  // statistics lent during the last call (they are lent afresh).
  void pull();
  // Host to device: everything pull() copies, and the optimizer statistics
  // lent since the last pull().
  void push();
  // Bytes one pull() (or push()) moves, for the log.
  size_t bytes() const;

  // The callbacks' work (public for the C callbacks).
  const std::vector<DLTensor>& optimizer_views();
  const std::vector<DLTensor>& buffer_views();
  void snapshot_into(std::string& out);
  void restore(const char* data, size_t len);
  DeviceMemory& device_memory() { return host_memory_; }
  bool window_loss(double* loss) const { return state_.window_loss(loss); }

 private:
  TrainingState& state_;
  std::vector<torch::Tensor> params_, grad_buffers_, buffers_;  // host copies
  std::vector<torch::Tensor> device_buffers_;                   // the floating-point buffers they copy
  std::vector<std::vector<int64_t>> shapes_, buffer_shapes_, opt_shapes_;
  std::vector<DLTensor> param_views_, grad_views_, buffer_views_, opt_views_;
  std::vector<torch::Tensor> opt_device_, opt_host_;  // the statistics lent in this call
  DeviceMemory host_memory_{torch::Device(torch::kCPU)};  // the services of the lent (host) state
  loom_training_state_v1 view_{};
};

}  // namespace loom::train
