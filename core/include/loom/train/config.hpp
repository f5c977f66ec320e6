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
  std::string task;                 // required: "digits", "charlm", "teacher"
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
  int64_t threads = 0;              // intra-op threads; 0: LibTorch's default
  std::string on_nonfinite = "stop";  // stop | skip_step: what a non-finite loss or gradient does
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
