// SPDX-License-Identifier: Apache-2.0
// tasks/digits.cpp: the `digits` task. A multilayer perceptron classifies the
// 8x8 handwritten digits (1797 images, 10 classes) that Debian's
// python3-sklearn ships, with a held-out test split; it reports loss and
// accuracy.
//
// Data: each row of the CSV (plain or gzip, read with zlib) holds 64 pixels
// 0..16 then the label; pixels are scaled to [0, 1]. The split comes from
// split_seed alone (a Fisher-Yates shuffle driven by std::mt19937_64), so it
// is the same in every run and process whatever the run seed; both parts keep
// the file's order.
// Model: Linear(64, hidden) -> ReLU -> Linear(hidden, hidden) -> ReLU ->
// Linear(hidden, 10), LibTorch's default init after torch::manual_seed(seed).
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sys/stat.h>

#include "builtin.hpp"
#include "memory_estimate.hpp"

namespace loom::train::tasks {
namespace {

constexpr int kPixels = 64;
constexpr int kClasses = 10;

// The whole file, decompressed when it is gzip.
std::string read_file(const Options& options, const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    throw options.invalid("path", "names '" + path +
                                      "', which does not exist; install Debian's python3-sklearn, or set [task] path "
                                      "to a copy of digits.csv.gz");
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw options.invalid("path", "names '" + path + "', which cannot be opened");
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, n);
  int err = 0;
  std::string message = n < 0 ? gzerror(file, &err) : "";
  gzclose(file);
  if (n < 0) throw options.invalid("path", "names '" + path + "', which cannot be read: " + message);
  return text;
}

class DigitsTask : public ModuleTask {
 public:
  DigitsTask(const Options& options, uint64_t seed) {
    check_memory(options, estimate_digits(options));  // before allocating anything
    int64_t hidden = options.get_int("hidden", 1);
    double test_fraction = options.get_float("test_fraction", 0.0, 1.0, true);
    auto split_seed = static_cast<uint64_t>(options.get_int("split_seed", 0));
    std::string path = options.get_string("path");

    std::vector<float> pixels;
    std::vector<int64_t> labels;
    parse(options, path, read_file(options, path), pixels, labels);
    auto n = static_cast<int64_t>(labels.size());
    auto x = torch::tensor(pixels).view({n, kPixels}) / 16.0;
    auto y = torch::tensor(labels, torch::kLong);

    // The split: a permutation from split_seed; the first n_test rows are held out.
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::mt19937_64 rng(split_seed);
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
    auto n_test = std::clamp<int64_t>(std::llround(test_fraction * n), test_fraction > 0 ? 1 : 0, n - 1);
    std::vector<int64_t> test(order.begin(), order.begin() + n_test), train(order.begin() + n_test, order.end());
    std::sort(test.begin(), test.end());
    std::sort(train.begin(), train.end());
    auto pick = [&](const std::vector<int64_t>& rows) {
      auto idx = torch::tensor(rows, torch::kLong);
      return std::make_unique<TensorDataset>("digits", x.index_select(0, idx), y.index_select(0, idx));
    };
    train_ = pick(train);
    if (n_test > 0) test_ = pick(test);

    torch::manual_seed(seed);
    model_ = torch::nn::Sequential(torch::nn::Linear(kPixels, hidden), torch::nn::ReLU(),
                                   torch::nn::Linear(hidden, hidden), torch::nn::ReLU(),
                                   torch::nn::Linear(hidden, kClasses));
  }

  std::string name() const override { return "digits"; }
  
  const Dataset& train_data() const override { return *train_; }
  const Dataset* validation_data() const override { return test_.get(); }
  std::string headline_metric() const override { return "accuracy"; }

  torch::Tensor loss(const Batch& batch) override {
    auto device = device_of(*model_);
    return torch::cross_entropy_loss(model_->forward(batch.input.to(device)), batch.target.to(device));
  }

  Metrics evaluate(const Dataset& data) override {
    torch::NoGradGuard no_grad;
    auto device = device_of(*model_);
    double loss_sum = 0, correct = 0;
    const int64_t n = data.size(), chunk = 1024;
    for (int64_t start = 0; start < n; start += chunk) {
      std::vector<int64_t> indices;
      for (int64_t i = start; i < std::min(n, start + chunk); ++i) indices.push_back(i);
      Batch batch = data.get(indices);
      auto logits = model_->forward(batch.input.to(device));
      auto target = batch.target.to(device);
      loss_sum += torch::cross_entropy_loss(logits, target, {}, at::Reduction::Sum).item<double>();
      correct += logits.argmax(1).eq(target).sum().item<double>();
    }
    return {{"loss", n ? loss_sum / n : 0.0}, {"accuracy", n ? correct / n : 0.0}};
  }

 protected:
  torch::nn::Module& module() override { return *model_; }

 private:
  // Rows of 64 pixels (0..16) then the label (0..9); anything else names file:line.
  static void parse(const Options& options, const std::string& path, const std::string& text,
                    std::vector<float>& pixels, std::vector<int64_t>& labels) {
    size_t pos = 0;
    for (int line = 1; pos < text.size(); ++line) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string row = text.substr(pos, end - pos);
      pos = end + 1;
      if (row.find_first_not_of(" \r\t") == std::string::npos) continue;
      const char* p = row.c_str();
      for (int field = 0; field <= kPixels; ++field) {
        char* after = nullptr;
        double value = std::strtod(p, &after);
        bool last = field == kPixels;
        bool ok = after != p && value == std::floor(value) && value >= 0 && value <= (last ? 9 : 16) &&
                  (last ? after[strspn(after, " \r\t")] == '\0' : *after == ',');
        if (!ok) {
          throw options.invalid("path", "names '" + path + "', whose line " + std::to_string(line) +
                                            " is not 64 pixel values 0..16 and a label 0..9, comma-separated");
        }
        if (last) {
          labels.push_back(static_cast<int64_t>(value));
        } else {
          pixels.push_back(static_cast<float>(value));
        }
        p = after + 1;
      }
    }
    if (labels.size() < 2) throw options.invalid("path", "names '" + path + "', which holds fewer than 2 rows");
  }

  torch::nn::Sequential model_{nullptr};
  std::unique_ptr<TensorDataset> train_, test_;
};

}  // namespace

std::unique_ptr<Task> make_digits(const Options& options, uint64_t seed) {
  return std::make_unique<DigitsTask>(options, seed);
}

}  // namespace loom::train::tasks
