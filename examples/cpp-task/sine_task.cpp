// SPDX-License-Identifier: Apache-2.0
// A task compiled in C++ against the installed libloom: an MLP learns
// sin(x) on [-pi, pi]. Built as a shared library; `loom train` loads it when
// the config names it ([trainer] task_library) and selects it by name
// ([trainer] task = "sine").
//
// This uses Loom's C++ API (loom/train/task.hpp), which is tied to the
// LibTorch version libloom was built with: rebuild the library whenever Loom
// or LibTorch changes. Plugins written against the C SDK have no such tie.
#include <loom/train/task.hpp>

#include <cmath>

namespace {

// Samples held in memory: x in [-pi, pi] and sin(x), one row each.
class SineData : public loom::train::Dataset {
 public:
  SineData(int64_t n, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    x_ = torch::rand({n, 1}, gen) * (2 * M_PI) - M_PI;
    y_ = torch::sin(x_);
  }
  int64_t size() const override { return x_.size(0); }
  loom::train::Batch get(const std::vector<int64_t>& indices) const override {
    auto idx = torch::tensor(indices, torch::kLong);
    loom::train::Batch batch;
    batch.input = x_.index_select(0, idx);
    batch.target = y_.index_select(0, idx);
    batch.size = static_cast<int64_t>(indices.size());
    return batch;
  }

 private:
  torch::Tensor x_, y_;
};

class SineTask : public loom::train::ModuleTask {
 public:
  SineTask(const loom::train::TaskArgs& args, uint64_t seed)
      : train_(args.get_int("samples", 16, 1 << 24), 1234), validation_(1024, 4321) {
    const int64_t hidden = args.get_int("hidden", 1, 4096);
    torch::manual_seed(seed);
    model_ = torch::nn::Sequential(torch::nn::Linear(1, hidden), torch::nn::Tanh(), torch::nn::Linear(hidden, 1));
  }
  std::string name() const override { return "sine"; }
  const loom::train::Dataset& train_data() const override { return train_; }
  const loom::train::Dataset* validation_data() const override { return &validation_; }
  std::string headline_metric() const override { return "loss"; }
  torch::Tensor loss(const loom::train::Batch& batch) override {
    return torch::mse_loss(model_->forward(batch.input), batch.target);
  }
  loom::train::Metrics evaluate(const loom::train::Dataset& data) override {
    std::vector<int64_t> all(static_cast<size_t>(data.size()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    return {{"loss", loss(data.get(all)).item<double>()}};
  }

 protected:
  torch::nn::Module& module() override { return *model_; }

 private:
  SineData train_, validation_;
  torch::nn::Sequential model_{nullptr};
};

// Runs when `loom train` loads this library.
const bool registered = [] {
  loom::train::register_task(
      "sine",
      {{"samples", "int", "4096", "training samples"}, {"hidden", "int", "32", "hidden width of the MLP"}},
      [](const loom::train::TaskArgs& args, uint64_t seed) { return std::make_unique<SineTask>(args, seed); });
  return true;
}();

}  // namespace
