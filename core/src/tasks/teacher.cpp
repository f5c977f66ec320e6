// SPDX-License-Identifier: Apache-2.0
// tasks/teacher.cpp: the `teacher` task. A small student network regresses
// the outputs of a fixed random teacher network; it needs no files and reports
// the mean squared error.
//
// Teacher: Linear(inputs, 64) -> tanh -> Linear(64, 1), drawn from a private
// CPU generator seeded with teacher_seed, in this order: W1 [64, inputs] and
// b1 [64] ~ N(0,1)/sqrt(inputs), W2 [1, 64] and b2 [1] ~ N(0,1)/8. The same
// generator then draws the training inputs x ~ N(0,1) [samples, inputs] and,
// when noise > 0, noise * N(0,1) added to the training targets. Validation:
// 1024 inputs from a generator seeded with teacher_seed + 1, noise-free
// targets. None of this touches LibTorch's global generator.
//
// Student: Sequential(Linear(inputs, hidden), Tanh, Linear(hidden, 1)),
// parameters "0.weight", "0.bias", "2.weight", "2.bias" (the names PyTorch's
// nn.Sequential gives), with LibTorch's default Linear init after
// torch::manual_seed(seed). LibTorch's CPU generator does not draw the same
// numbers as PyTorch's, so a PyTorch script reproduces a run by loading these
// initial weights and the data, not by reseeding.
//
// emulated_step_ms makes each training batch's loss wait that long, as a
// host waits for its accelerator: many teacher peers on one machine then
// contend for its cores no more than GPU hosts would, so a benchmark of
// their rounds measures the protocol's waits (bench/swarm_scale.py).
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "builtin.hpp"
#include "memory_estimate.hpp"

namespace loom::train::tasks {
namespace {

constexpr int64_t kTeacherHidden = 64;
constexpr int64_t kValidationSamples = 1024;

class TeacherTask : public ModuleTask {
 public:
  TeacherTask(const Options& options, uint64_t seed) {
    check_memory(options, estimate_teacher(options));  // before allocating anything
    int64_t inputs = options.get_int("inputs", 1);
    int64_t hidden = options.get_int("hidden", 1);
    int64_t samples = options.get_int("samples", 1);
    auto teacher_seed = static_cast<uint64_t>(options.get_int("teacher_seed", 0));
    double noise = options.get_float("noise", 0.0, INFINITY);
    step_wait_ = std::chrono::duration<double, std::milli>(options.get_float("emulated_step_ms", 0.0, 10000.0));

    auto gen = at::detail::createCPUGenerator(teacher_seed);
    auto w1 = torch::randn({kTeacherHidden, inputs}, gen) / std::sqrt(static_cast<double>(inputs));
    auto b1 = torch::randn({kTeacherHidden}, gen) / std::sqrt(static_cast<double>(inputs));
    auto w2 = torch::randn({1, kTeacherHidden}, gen) / std::sqrt(static_cast<double>(kTeacherHidden));
    auto b2 = torch::randn({1}, gen) / std::sqrt(static_cast<double>(kTeacherHidden));
    auto teacher = [&](const torch::Tensor& x) { return torch::tanh(x.matmul(w1.t()) + b1).matmul(w2.t()) + b2; };

    auto x = torch::randn({samples, inputs}, gen);
    auto y = teacher(x);
    if (noise > 0) y = y + noise * torch::randn({samples, 1}, gen);
    train_ = std::make_unique<TensorDataset>("teacher", x, y);

    auto val_gen = at::detail::createCPUGenerator(teacher_seed + 1);
    auto val_x = torch::randn({kValidationSamples, inputs}, val_gen);
    validation_ = std::make_unique<TensorDataset>("teacher", val_x, teacher(val_x));

    torch::manual_seed(seed);
    model_ = torch::nn::Sequential(torch::nn::Linear(inputs, hidden), torch::nn::Tanh(), torch::nn::Linear(hidden, 1));
  }

  std::string name() const override { return "teacher"; }
  
  const Dataset& train_data() const override { return *train_; }
  const Dataset* validation_data() const override { return validation_.get(); }
  std::string headline_metric() const override { return "loss"; }

  torch::Tensor loss(const Batch& batch) override {
    if (step_wait_.count() > 0) std::this_thread::sleep_for(step_wait_);
    auto device = device_of(*model_);
    return torch::mse_loss(model_->forward(batch.input.to(device)), batch.target.to(device));
  }

  Metrics evaluate(const Dataset& data) override {
    torch::NoGradGuard no_grad;
    auto device = device_of(*model_);
    double sum = 0;
    const int64_t n = data.size(), chunk = 4096;
    for (int64_t start = 0; start < n; start += chunk) {
      std::vector<int64_t> indices;
      for (int64_t i = start; i < std::min(n, start + chunk); ++i) indices.push_back(i);
      Batch batch = data.get(indices);
      auto out = model_->forward(batch.input.to(device));
      sum += torch::mse_loss(out, batch.target.to(device), at::Reduction::Sum).item<double>();
    }
    return {{"loss", n ? sum / n : 0.0}};
  }

 protected:
  torch::nn::Module& module() override { return *model_; }

 private:
  torch::nn::Sequential model_{nullptr};
  std::unique_ptr<TensorDataset> train_, validation_;
  std::chrono::duration<double, std::milli> step_wait_{0};
};

}  // namespace

std::unique_ptr<Task> make_teacher(const Options& options, uint64_t seed) {
  return std::make_unique<TeacherTask>(options, seed);
}

}  // namespace loom::train::tasks
