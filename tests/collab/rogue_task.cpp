// SPDX-License-Identifier: Apache-2.0
// An honest task that goes wrong on purpose, for the swarm tests of broken
// peers: a library `loom train` loads ([trainer] task_library) that registers
// task "rogue". It wraps digits (passing on digits' options as set) and, after `after` losses, multiplies each loss
// by nan (mode "nan": every gradient is nan) or by `scale` (mode "huge":
// finite gradients scale times too large; mode "scale" with a negative
// scale: sign-flipped gradients, the Byzantine tests' attack), or, mode
// "slow", sleeps delay_ms before each honest loss (a peer that falls behind).
// It names itself after the wrapped task, so its swarm fingerprint is the
// honest peers'.
#include <loom/train/task.hpp>

#include <chrono>
#include <limits>
#include <thread>

namespace {

using loom::train::Batch;
using loom::train::Dataset;
using loom::train::Metrics;
using loom::train::NamedTensor;
using loom::train::Task;

// The options of digits that the config set, for the wrapped task.
loom::train::TaskOptions wrapped_options(const loom::train::TaskArgs& args) {
  loom::train::TaskOptions out;
  for (const auto& o : loom::train::task_options("digits"))
    if (args.is_set(o.name)) out.values[o.name] = args.text(o.name);
  return out;
}

class RogueTask : public Task {
 public:
  RogueTask(const loom::train::TaskArgs& args, uint64_t seed)
      : inner_(loom::train::make_task("digits", wrapped_options(args), seed)),
        mode_(args.get_string("mode")),
        after_(args.get_int("after", 0)),
        scale_(args.get_float("scale", -1e38, 1e38)),
        delay_ms_(args.get_int("delay_ms", 0, 60000)) {
    if (mode_ != "nan" && mode_ != "huge" && mode_ != "scale" && mode_ != "slow")
      throw args.invalid("mode", "must be \"nan\", \"huge\", \"scale\" or \"slow\", not \"" + mode_ + "\"");
  }
  std::string name() const override { return inner_->name(); }
  std::vector<NamedTensor> parameters() override { return inner_->parameters(); }
  std::vector<NamedTensor> buffers() override { return inner_->buffers(); }
  void set_training(bool training) override { inner_->set_training(training); }
  const Dataset& train_data() const override { return inner_->train_data(); }
  const Dataset* validation_data() const override { return inner_->validation_data(); }
  std::string headline_metric() const override { return inner_->headline_metric(); }
  Metrics evaluate(const Dataset& data) override { return inner_->evaluate(data); }
  torch::Tensor loss(const Batch& batch) override {
    torch::Tensor l = inner_->loss(batch);
    if (losses_++ < after_) return l;
    if (mode_ == "slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      return l;
    }
    return l * (mode_ == "nan" ? std::numeric_limits<double>::quiet_NaN() : scale_);
  }

 private:
  std::unique_ptr<Task> inner_;
  std::string mode_;
  int64_t after_;
  double scale_;
  int64_t delay_ms_;
  int64_t losses_ = 0;
};

const bool registered = [] {
  std::vector<loom::train::TaskOptionInfo> options = {
      {"mode", "string", "nan",
       "nan: every loss times nan; huge or scale: every loss times scale (scale -10: sign-flipped gradients ten "
       "times too large, a Byzantine peer's attack); slow: every loss delay_ms late, honest"},
      {"after", "int", "10", "honest losses before it goes wrong"},
      {"scale", "float", "1e30", "the factor of modes huge and scale"},
      {"delay_ms", "int", "0", "mode slow: milliseconds each loss waits"}};
  for (const auto& o : loom::train::task_options("digits")) options.push_back(o);
  loom::train::register_task("rogue", options, [](const loom::train::TaskArgs& args, uint64_t seed) {
    return std::make_unique<RogueTask>(args, seed);
  });
  return true;
}();

}  // namespace
