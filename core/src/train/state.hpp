// SPDX-License-Identifier: Apache-2.0
// The training state a run owns: the task's parameters and buffers, the
// optimizer, and the step counter; DLPack views of parameters, gradients and
// buffers for the strategy; and its serialised form (checkpoints, and
// snapshots for joining peers).
// Internal; includes LibTorch.
#pragma once

#include <dlpack/dlpack.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/strategy.h"
#include "loom/train/config.hpp"
#include "loom/train/task.hpp"
#include "device_memory.hpp"

namespace loom::train {

class TrainingState {
 public:
  TrainingState(Task& task, const TrainerSettings& settings);

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<std::string>& param_names() const { return names_; }
  // The model's buffers (BatchNorm statistics), by name, as the task has them.
  const std::vector<NamedTensor>& buffers() const { return buffers_; }
  void set_lr(double lr);
  // Zeroes the gradients in place: their buffers are what the strategy sees.
  void zero_grads();
  // Whether every gradient is finite (no inf or nan).
  bool grads_finite() const;
  // Throws Error::runtime if backward replaced a gradient buffer.
  void check_views() const;

  // The view lent to the strategy (valid while this object lives): tensors
  // on the training device, with its stream and memory services (ABI 1.6).
  const loom_training_state_v1& abi_view() const { return view_; }
  DeviceMemory& device_memory() { return memory_; }
  // The flat buffers the gradients are slices of, one per dtype.
  const std::vector<torch::Tensor>& grad_buffers() const { return grad_buffers_; }

  // Parameters, buffers, optimizer state and step, in the raw format of
  // state_format.cpp (a text header, then each tensor's bytes): writing is
  // one copy per tensor, into `out`'s existing storage when it is large
  // enough. restore copies into the existing tensors (their addresses stay
  // what the strategy was given), reads that format and the LibTorch
  // archive earlier versions wrote, and throws Error::usage when the bytes
  // do not fit this model.
  std::string snapshot() const;
  void snapshot_into(std::string& out) const;
  void restore(const std::string& bytes) { restore(bytes.data(), bytes.size()); }
  void restore(const char* data, size_t len);

  // The optimizer's floating-point statistics (momentum buffers, Adam's
  // moments) in parameter order, as lent to the strategy (ABI 1.2): valid
  // until the next optimizer step, restore or call.
  const std::vector<DLTensor>& optimizer_views();
  // The tensors the last optimizer_views() describes, in the same order.
  const std::vector<torch::Tensor>& optimizer_tensors() const { return opt_tensors_; }
  // The floating-point buffers, as lent to the strategy (ABI 1.4).
  const std::vector<DLTensor>& buffer_views();

  // Gives every parameter its optimizer state now, as the optimizer's first
  // step would (zeros, step 0), so that an optimizer living elsewhere
  // (Python's torch.optim, python/) can share these tensors from the start.
  // Returns each parameter's statistics in optimizer_views() order.
  std::vector<std::vector<torch::Tensor>> init_optimizer_state();
  // Replaces the optimizer's line of the description (an optimizer living
  // elsewhere whose statistics Loom does not carry: python/'s RMSprop).
  void describe_optimizer(const std::string& line);
  // Step counters kept elsewhere (Python's per-parameter 'step' tensors, one
  // per parameter): snapshots read them, restore writes them.
  void share_step_counters(std::vector<torch::Tensor> counters) { step_counters_ = std::move(counters); }

  int64_t step = 0;  // global optimizer steps, as saved in snapshots
  // Where snapshots read the step from, when set (the strategy's global
  // step: a swarm peer's moves when it loads a state, between the trainer's
  // own updates of `step`, and a checkpointer keeps snapshots it takes
  // itself). Unset: `step`.
  void set_step_source(std::function<int64_t()> source) { step_source_ = std::move(source); }

  // The mean loss of the window about to be handed to the strategy (ABI
  // 1.10's window_loss); forget_window_loss() when none is known.
  void set_window_loss(double loss) {
    window_loss_ = loss;
    has_window_loss_ = true;
  }
  void forget_window_loss() { has_window_loss_ = false; }
  bool window_loss(double* loss) const {
    if (has_window_loss_) *loss = window_loss_;
    return has_window_loss_;
  }

 private:
  Task& task_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<DLTensor> param_views_, grad_views_;
  std::vector<void*> grad_data_;
  std::vector<torch::Tensor> grad_buffers_;  // the flat storage the gradients are views of
  loom_training_state_v1 view_{};
  std::vector<torch::Tensor> opt_tensors_;  // what opt_views_ point into
  std::vector<std::vector<int64_t>> opt_shapes_;
  std::vector<DLTensor> opt_views_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::vector<int64_t>> buffer_shapes_;
  std::vector<DLTensor> buffer_views_;
  std::vector<torch::Tensor> step_counters_;  // see share_step_counters
  bool shared_statistics_ = false;            // init_optimizer_state handed them out
  // state.cpp: the LibTorch archive of loom-state-1 (checkpoints of earlier versions).
  void restore_archive(const char* data, size_t len);
  // state_format.cpp: the raw format (loom-state-2).
  void restore_raw(const char* data, size_t len);
  // The optimizer's state of parameter i, made as its first step would
  // (zeros, step 0) when it has none yet; its statistics from make(p) when
  // given (a restore's views of one huge-page block), else zeros_like(p).
  torch::optim::OptimizerParamState& param_state(
      size_t i, const std::function<torch::Tensor(const torch::Tensor&)>& make = nullptr);
  // Copies the Python-held step counters into the optimizer's state (before a snapshot).
  void sync_step_counters() const;
  std::string description_;  // what view_.description points to (ABI 1.5)
  DeviceMemory memory_;      // view_'s device services (ABI 1.6)
  std::function<int64_t()> step_source_;
  double window_loss_ = 0;
  bool has_window_loss_ = false;
};

// What is trained, as lent to strategies (loom_training_state_v1.description):
// the task, each parameter and buffer with dtype and shape, and the
// optimizer with its state's layout, one per line.
std::string describe_training(const std::string& task, const std::vector<std::string>& param_names,
                              const std::vector<torch::Tensor>& params, const std::vector<NamedTensor>& buffers,
                              const TrainerSettings& settings);

}  // namespace loom::train
