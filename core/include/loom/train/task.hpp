// SPDX-License-Identifier: Apache-2.0
// loom/train/task.hpp: what a training task supplies to the trainer: the
// tensors it trains, its data, and how to compute the loss and the
// validation metrics. Built-in tasks (digits, charlm, teacher, torchscript)
// and tasks compiled by users (register_task) implement it.
//
// This is a C++ API and includes LibTorch: a task compiled against it is tied
// to the LibTorch version libloom was built with (unlike the C plugin ABI in
// sdk/, which is stable across LibTorch versions). Include it only from files
// that need it.
//
// Tasks are built from their [task] options and the run's seed, so the same
// config gives the same initial weights and data in every process.
// Thread safety: a task is used from one thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/status.hpp"
#include "loom/train/task_options.hpp"

namespace loom::train {

// Samples selected by index, stacked along dimension 0. The built-in tasks
// use input and target; data sets with named fields (the torchscript task's)
// use fields.
struct Batch {
  torch::Tensor input;
  torch::Tensor target;
  int64_t size = 0;
  std::map<std::string, torch::Tensor> fields;
};

// A data set addressed by sample index.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
  // Sizes of consecutive blocks of samples (shard files) that the sampler
  // keeps together, so a streamed data set holds at most two at a time.
  // Empty (the default): every sample is equally cheap to reach.
  virtual std::vector<int64_t> blocks() const { return {}; }
  // Whether get() over every sample is cheap (the data is in memory).
  virtual bool in_memory() const { return true; }
};

// Validation results by name ("loss", "accuracy", "bpc").
using Metrics = std::map<std::string, double>;

// A tensor of the model with its name ("fc1.weight", "bn1.running_mean").
using NamedTensor = std::pair<std::string, torch::Tensor>;

class Task {
 public:
  virtual ~Task() = default;

  virtual std::string name() const = 0;
  // The trained tensors, already initialised, in a fixed order (the same in
  // every process). The trainer's optimizer steps them and the strategy
  // averages their gradients.
  virtual std::vector<NamedTensor> parameters() = 0;
  // The model's other state (BatchNorm's running statistics): saved in
  // checkpoints, sent to joining peers, broadcast by ddp and averaged by a
  // swarm. Their storage must stay where it is between calls.
  virtual std::vector<NamedTensor> buffers() { return {}; }
  // Training mode (dropout, batch statistics) or evaluation mode.
  virtual void set_training(bool training) = 0;
  // Moves the model to device; the trainer calls it once, before anything
  // holds the tensors. They keep their identity (their data moves, as
  // Module::to does), and loss() and evaluate() move each batch to where
  // the model is. The default moves parameters() and buffers().
  virtual void to(const torch::Device& device);
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

// A task whose model is a torch::nn::Module: parameters, buffers and mode
// come from it.
class ModuleTask : public Task {
 public:
  std::vector<NamedTensor> parameters() override { return named(module().named_parameters()); }
  std::vector<NamedTensor> buffers() override { return named(module().named_buffers()); }
  void set_training(bool training) override { module().train(training); }
  void to(const torch::Device& device) override { module().to(device); }

 protected:
  virtual torch::nn::Module& module() = 0;

 private:
  static std::vector<NamedTensor> named(const torch::OrderedDict<std::string, torch::Tensor>& dict) {
    std::vector<NamedTensor> out;
    for (const auto& item : dict) out.emplace_back(item.key(), item.value());
    return out;
  }
};

// Builds a task. Throws Error::usage naming the option (and file:line) for a
// bad or unknown option, and Error::usage naming the file and what would be
// valid for unusable model or data files.
std::unique_ptr<Task> make_task(const std::string& task, const TaskOptions& options, uint64_t seed);

// Typed, range-checked access to a task's options, as a factory receives
// them: every value is already known and of its declared type. Immutable.
class TaskArgs {
 public:
  TaskArgs(std::string task, TaskOptions raw, std::vector<TaskOptionInfo> infos)
      : task_(std::move(task)), raw_(std::move(raw)), infos_(std::move(infos)) {}

  const std::string& task() const { return task_; }
  // The value as set, or its default.
  std::string text(const std::string& name) const;
  bool is_set(const std::string& name) const { return raw_.values.count(name) > 0; }
  // The value, which must lie in [min, max].
  int64_t get_int(const std::string& name, int64_t min, int64_t max = INT64_MAX) const;
  // The value, which must lie in [lo, hi] (or [lo, hi) when hi_open).
  double get_float(const std::string& name, double lo, double hi, bool hi_open = false) const;
  bool get_bool(const std::string& name) const { return text(name) == "true"; }
  std::string get_string(const std::string& name) const { return text(name); }
  // A "list" option's items (empty when unset and without a default).
  std::vector<std::string> get_list(const std::string& name) const;
  // "file:line: " where the option was set, or "" when it was not.
  std::string where(const std::string& name) const;
  // Error::usage("<file:line>: option 'name' for task 't' <problem>").
  Error invalid(const std::string& name, const std::string& problem) const;

 private:
  std::string task_;
  TaskOptions raw_;
  std::vector<TaskOptionInfo> infos_;
};

// Makes a task from its checked options and the run's seed.
using TaskFactory = std::function<std::unique_ptr<Task>(const TaskArgs& args, uint64_t seed)>;

// Adds a task compiled by the user, selected with [trainer] task = name.
// Call it before the config is read (from main, or from the static
// initialiser of a library named by [trainer] task_library). Throws
// Error::usage if the name is taken.
void register_task(const std::string& name, std::vector<TaskOptionInfo> options, TaskFactory factory);

}  // namespace loom::train
