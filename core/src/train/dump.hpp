// SPDX-License-Identifier: Apache-2.0
// Writing a run's parameters (and, for the initial dump, its training data
// and sample order) as raw little-endian files plus manifest.json, so tools
// outside Loom (the PyTorch cross-check test) can reproduce the run.
#pragma once

#include <string>

#include "loom/train/config.hpp"

namespace loom::train {

class Task;
class TrainingState;
class Sampler;

void dump_run(const std::string& dir, Task& task, TrainingState& state, Sampler& sampler,
              const TrainerSettings& settings, bool with_data);

}  // namespace loom::train
