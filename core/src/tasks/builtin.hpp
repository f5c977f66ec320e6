// tasks/builtin.hpp: what the built-in tasks share (internal to libloom):
// typed access to the [task] options the registry has validated, and the
// factory of each task.
//
// Option values reach a task already type-checked against the table in
// registry.cpp; a task checks ranges through Options, so every error names the
// option, where it was set ("file:line") and what would be valid.
// Thread safety: Options is an immutable value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/status.hpp"
#include "loom/train/task.hpp"

namespace loom::train::tasks {

class Options {
 public:
  // `raw` holds only known, well-typed options; unset ones take the defaults
  // listed in `infos`.
  Options(std::string task, TaskOptions raw, std::vector<TaskOptionInfo> infos)
      : task_(std::move(task)), raw_(std::move(raw)), infos_(std::move(infos)) {}

  const std::string& task() const { return task_; }
  // The value as set, or its default.
  std::string text(const std::string& name) const;
  bool is_set(const std::string& name) const { return raw_.values.count(name) > 0; }
  // The value, which must be at least `min`.
  int64_t get_int(const std::string& name, int64_t min) const;
  // The value, which must lie in [lo, hi] (or [lo, hi) when hi_open).
  double get_float(const std::string& name, double lo, double hi, bool hi_open = false) const;
  std::string get_string(const std::string& name) const { return text(name); }
  // Error::usage("<file:line>: option 'name' for task 't' <problem>").
  Error invalid(const std::string& name, const std::string& problem) const;

 private:
  std::string task_;
  TaskOptions raw_;
  std::vector<TaskOptionInfo> infos_;
};

// "file:line: " where the option was set, or "" when it was not.
std::string where(const TaskOptions& options, const std::string& name);

// Index tensor for Dataset::get; throws Error::runtime for an index outside [0, size).
torch::Tensor index_tensor(const std::vector<int64_t>& indices, int64_t size, const char* dataset);

// The device of the model's first parameter (CPU when it has none).
torch::Device device_of(torch::nn::Module& model);

// Inputs and targets held as tensors whose first dimension is the sample.
class TensorDataset : public Dataset {
 public:
  TensorDataset(const char* name, torch::Tensor input, torch::Tensor target)
      : name_(name), input_(std::move(input)), target_(std::move(target)) {}
  int64_t size() const override { return input_.size(0); }
  Batch get(const std::vector<int64_t>& indices) const override {
    auto idx = index_tensor(indices, size(), name_);
    return {input_.index_select(0, idx), target_.index_select(0, idx), static_cast<int64_t>(indices.size())};
  }

 private:
  const char* name_;
  torch::Tensor input_, target_;
};

std::unique_ptr<Task> make_digits(const Options& options, uint64_t seed);
std::unique_ptr<Task> make_teacher(const Options& options, uint64_t seed);
std::unique_ptr<Task> make_charlm(const Options& options, uint64_t seed);

}  // namespace loom::train::tasks
