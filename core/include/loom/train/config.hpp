// SPDX-License-Identifier: Apache-2.0
// loom/train/config.hpp: a training run's configuration, read from TOML.
//
//   [trainer]             what and how to train (TrainerSettings below)
//   [task]                options of the task (see `loom train --help-task NAME`)
//   [strategy]            name = "single" (default) | a strategy plugin; [strategy.options]
//   [collective]          name = a collective plugin; [collective.options]
//   [plugins]             path = folder or list of folders
//
// Every error names the file, line and key, and what would be valid
// (Error::usage, exit code 2). No LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/host.hpp"
#include "loom/train/task_options.hpp"

namespace loom::train {

struct TrainerSettings {
  std::string task;                 // required: "digits", "charlm", "teacher", "torchscript", or a registered task
  int64_t max_steps = 100;          // global optimizer steps
  int64_t batch_size = 32;          // samples per process per forward/backward
  int64_t accumulate = 1;           // forward/backward passes per optimizer step
  std::string optimizer = "adam";   // sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;            // sgd only
  double weight_decay = 0.0;
  std::string schedule = "constant";  // constant | cosine | linear (decay to 0 at max_steps)
  int64_t warmup_steps = 0;         // linear warm-up from 0, before the schedule
  double grad_clip = 0.0;           // max global L2 norm; 0: off
  uint64_t seed = 0;
  int64_t log_every = 10;           // steps between progress lines
  int64_t val_every = 0;            // steps between validations; 0: only at the end
  int64_t checkpoint_every = 0;     // steps between checkpoints; 0: only at the end
  std::string output_dir;           // default runs/<task>, relative to the working directory
  std::string device = "cpu";       // cpu | cuda | cuda:N
  // fp32 | bf16: bf16 runs the forward pass under autocast (matrix products
  // and convolutions in bfloat16, parameters, gradients and optimizer in fp32).
  std::string precision = "fp32";
  // auto | always: whether a strategy without device support
  // (LOOM_CAP_DEVICE_MEMORY) is lent host copies of the state; "always"
  // stages even on the CPU, to check a strategy plugin against staging.
  std::string host_staging = "auto";
  int64_t threads = 0;              // intra-op threads; 0: LibTorch's default
  std::string on_nonfinite = "stop";  // stop | skip_step: a step with a non-finite loss or gradients
  std::string task_library;         // a shared library that registers C++ tasks (register_task)
};

struct TrainConfig {
  std::string path;            // the config file
  TrainerSettings trainer;
  TaskOptions task;
  std::string strategy = "single";
  std::string strategy_where;    // "file:line" of strategy.name, if set
  std::string collective_where;  // "file:line" of collective.name, if set
  HostConfig host;             // plugin search path and plugin options
};

// Reads path, applies --set overrides ("section.key=value", the value parsed
// as TOML, else taken as a string) and validates everything it can without
// loading plugins or data.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::vector<std::string>& cli_plugin_paths);

}  // namespace loom::train
