// loom/train/task.hpp: what a training task supplies to the trainer: a model,
// its data, and how to compute the loss and the validation metrics.
//
// This header includes LibTorch: include it only from files that need it.
// Tasks are built from their [task] options and the run's seed, so the same
// config gives the same initial weights and data in every process.
// Thread safety: a task is used from one thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/train/task_options.hpp"

namespace loom::train {

// Samples selected by index, stacked along dimension 0.
struct Batch {
  torch::Tensor input;
  torch::Tensor target;
  int64_t size = 0;
};

// A data set held in memory, addressed by sample index.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
};

// Validation results by name ("loss", "accuracy", "bpc"); the first entry of
// Task::headline_metric() is what the final line reports.
using Metrics = std::map<std::string, double>;

class Task {
 public:
  virtual ~Task() = default;

  virtual std::string name() const = 0;
  // The model, already initialised from the seed given at construction.
  virtual torch::nn::Module& model() = 0;
  virtual const Dataset& train_data() const = 0;
  // Held-out data, or nullptr when the task has none.
  virtual const Dataset* validation_data() const = 0;
  // Mean loss over the batch (a scalar with a graph for backward).
  virtual torch::Tensor loss(const Batch& batch) = 0;
  // Metrics over a whole data set, computed without gradients.
  virtual Metrics evaluate(const Dataset& data) = 0;
  // The metric the run reports at the end ("accuracy" for digits).
  virtual std::string headline_metric() const = 0;
};

// Description of one task option, for validation and `loom train --help-task`.
struct TaskOptionInfo {
  std::string name;
  std::string type;  // "int", "float", "string", "bool"
  std::string default_value;
  std::string help;
};

// The built-in task names: "charlm", "digits", "teacher".
std::vector<std::string> task_names();
// The options a task accepts; throws Error::usage for an unknown task.
std::vector<TaskOptionInfo> task_options(const std::string& task);
// Builds a task. Throws Error::usage naming the option (and file:line) for a
// bad or unknown option, and Error::usage naming the file and the Debian
// package for missing data files.
std::unique_ptr<Task> make_task(const std::string& task, const TaskOptions& options, uint64_t seed);

}  // namespace loom::train
