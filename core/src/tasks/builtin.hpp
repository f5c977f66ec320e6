// SPDX-License-Identifier: Apache-2.0
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

// The built-in tasks read their options through TaskArgs (loom/train/task.hpp).
using Options = TaskArgs;

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
    Batch batch;
    batch.input = input_.index_select(0, idx);
    batch.target = target_.index_select(0, idx);
    batch.size = static_cast<int64_t>(indices.size());
    return batch;
  }

 private:
  const char* name_;
  torch::Tensor input_, target_;
};

std::unique_ptr<Task> make_digits(const Options& options, uint64_t seed);
std::unique_ptr<Task> make_teacher(const Options& options, uint64_t seed);
std::unique_ptr<Task> make_charlm(const Options& options, uint64_t seed);
std::unique_ptr<Task> make_torchscript(const Options& options, uint64_t seed);

// The option table of the torchscript task.
std::vector<TaskOptionInfo> torchscript_options();

}  // namespace loom::train::tasks
