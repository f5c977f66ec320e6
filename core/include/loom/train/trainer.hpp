// SPDX-License-Identifier: Apache-2.0
// loom/train/trainer.hpp: run a training job from its configuration.
//
// The loop: forward, backward, the strategy's after_backward (which averages
// gradients and decides whether to step), gradient clipping, the optimizer
// step and LR schedule (following the strategy's global step), validation,
// metrics and checkpoints. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "loom/train/config.hpp"

namespace loom::train {

struct TrainRequest {
  bool resume = false;         // continue from <output_dir>/checkpoint.pt
  std::string dump_init_dir;   // write initial parameters, data and sample order (raw files + manifest.json)
  std::string dump_final_dir;  // write the final parameters the same way
  // The first SIGINT or SIGTERM ends training at the next step boundary: a
  // checkpoint is written and the strategy leaves (a swarm peer says
  // goodbye and its round-mates go on). For processes that own their signals
  // (loom train), and only where a process can stop alone (single, a swarm
  // peer); a ddp rank cannot leave its job, and `loom launch` stops them all.
  bool stop_on_signals = false;
};

struct TrainResult {
  int64_t steps = 0;                      // global steps reached
  std::map<std::string, double> metrics;  // final validation metrics
  std::string headline;                   // e.g. "accuracy"
  std::string checkpoint;                 // last checkpoint written, if any
  bool global_zero = true;
  std::string stopped_by;                 // "SIGTERM" when that signal ended training early (stop_on_signals)
};

// Runs the job to max_steps (or until the strategy stops it). Throws
// Error::usage for configuration problems, Error::runtime for failures.
TrainResult run_training(const TrainConfig& config, const TrainRequest& request);

}  // namespace loom::train
