// SPDX-License-Identifier: Apache-2.0
// loom/train/external_loop.hpp: a training loop that is not Loom's own (a
// Python loop through the `loom` package, or any C++ loop) trained by a
// strategy plugin (collab, ddp, ...) through the same host as `loom train`.
//
// The loop keeps its model, data, loss and optimizer. Loom lends the
// strategy the model's own parameters, gradient buffers it attaches to them
// (slices of one flat buffer, zeroed in place, never replaced), the model's
// buffers, and optimizer statistics in the layout of `loom train`'s
// optimizer (sgd, adam or adamw), so that snapshots, state averaging and a
// joining peer's download are the same as `loom train` peers': both kinds
// of peer can train one model together.
//
// The loop calls, per micro-batch: backward, then after_backward(samples);
// when that returns true, its optimizer steps, then after_optimizer_step(),
// then zero_grads(). Its optimizer must keep its statistics in the tensors
// optimizer_statistics() returns (and its step counters in the tensors given
// to share_step_counters), which stay where they are.
//
// Includes LibTorch (like loom/train/task.hpp). One thread at a time; calls
// may block for a swarm round. Errors: Error::usage for what the user must
// change (a bad option, a model the strategy cannot train), Error::runtime
// otherwise.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/train/task.hpp"

namespace loom {
class Host;
class Strategy;
}  // namespace loom

namespace loom::train {

class TrainingState;

struct ExternalLoopSpec {
  std::string strategy = "collab";
  std::map<std::string, std::string> options;             // the strategy's, as text
  // Who set the options, for messages: "loom.Optimizer" names an option
  // loom.Optimizer(run_id=...); empty: "option run_id".
  std::string options_from;
  std::string collective;                                 // the collective collective_options are for
  std::map<std::string, std::string> collective_options;  // its options, as text
  std::vector<std::string> plugin_path;                   // searched before LOOM_PLUGIN_PATH and the default
  // What is trained, as peers compare it: "torchscript" matches a `loom
  // train` peer training the same TorchScript module.
  std::string task = "torchscript";
  std::vector<NamedTensor> params;   // contiguous CPU tensors, in a fixed order
  std::vector<NamedTensor> buffers;  // the model's other state (BatchNorm statistics)
  std::string optimizer = "adam";    // sgd | adam | adamw: the statistics' layout
  double momentum = 0;               // sgd's (0: no momentum buffer)
  // Another optimizer, whose statistics Loom neither lends nor carries in
  // snapshots (optimizer "sgd", momentum 0): its name, which peers compare
  // ("RMSprop"). Empty: the optimizer above.
  std::string other_optimizer;
  int64_t batch_size = 0;            // samples of one micro-batch of this process
  int64_t max_steps = -1;            // the last epoch, when known (a strategy finishes there)
};

class ExternalLoop {
 public:
  // Loads and initialises the strategy plugin (its options are checked
  // here) and builds the lent state; setup() is separate.
  explicit ExternalLoop(ExternalLoopSpec spec);
  ~ExternalLoop();  // tears the strategy down if setup() ran
  ExternalLoop(const ExternalLoop&) = delete;
  ExternalLoop& operator=(const ExternalLoop&) = delete;

  // Each parameter's optimizer statistics, created now as zeros:
  // {exp_avg, exp_avg_sq} for adam and adamw, {momentum_buffer} for sgd
  // with momentum, {} otherwise.
  std::vector<std::vector<torch::Tensor>> optimizer_statistics();
  // Per-parameter step counters (scalar tensors) kept by the loop's
  // optimizer: snapshots read them, loaded states write them.
  void share_step_counters(std::vector<torch::Tensor> counters);

  // The strategy's setup: a swarm peer joins (and loads the swarm's state).
  void setup();
  // The gradients of `samples` more samples are in the buffers; true when
  // the optimizer steps now on them (they were averaged). loss: their mean
  // training loss when the loop knows it (lent to the strategy, ABI 1.10).
  bool after_backward(uint64_t samples, std::optional<double> loss = std::nullopt);
  void after_optimizer_step();
  // Loads the newest state the other processes hold, now, between steps
  // (strategy ABI 1.8): true when one was loaded; false, with *why, when
  // none could be (the state is unchanged). Error::usage for a strategy
  // that has nothing to load (single, ddp).
  bool load_state_from_peers(std::string* why);
  void zero_grads();
  bool grads_finite() const;
  int64_t global_step() const;
  bool should_stop() const;
  std::string status_line() const;
  std::string description() const;
  // Leaves (a swarm peer says goodbye); idempotent.
  void teardown();

 private:
  ExternalLoopSpec spec_;
  std::unique_ptr<Host> host_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<TrainingState> state_;
  std::shared_ptr<Strategy> strategy_;
  bool set_up_ = false;
  bool torn_down_ = false;
};

}  // namespace loom::train
