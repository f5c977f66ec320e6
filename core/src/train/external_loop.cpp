// SPDX-License-Identifier: Apache-2.0
#include "loom/train/external_loop.hpp"

#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"
#include "loom/status.hpp"
#include "loom/strategy.hpp"
#include "loom/train/config.hpp"
#include "state.hpp"

namespace loom::train {
namespace {

// The loop's model as a task: its named parameters and buffers, the very
// tensors the loop holds (the gradients Loom attaches are the ones its
// autograd fills). The data and the loss stay in the loop.
class LoopModel : public Task {
 public:
  LoopModel(std::string name, std::vector<NamedTensor> params, std::vector<NamedTensor> buffers)
      : name_(std::move(name)), params_(std::move(params)), buffers_(std::move(buffers)) {}
  std::string name() const override { return name_; }
  std::vector<NamedTensor> parameters() override { return params_; }
  std::vector<NamedTensor> buffers() override { return buffers_; }
  void set_training(bool) override {}
  void to(const torch::Device&) override {}
  const Dataset& train_data() const override { throw none("data"); }
  const Dataset* validation_data() const override { return nullptr; }
  torch::Tensor loss(const Batch&) override { throw none("loss"); }
  Metrics evaluate(const Dataset&) override { throw none("metrics"); }
  std::string headline_metric() const override { return "loss"; }

 private:
  static Error none(const std::string& what) {
    return Error::runtime("an external loop's model has no " + what + " in Loom: the loop computes it");
  }
  std::string name_;
  std::vector<NamedTensor> params_, buffers_;
};

HostConfig host_config(const ExternalLoopSpec& spec) {
  HostConfig config;
  config.search_path = plugin_search_path(spec.plugin_path, {});
  const std::pair<loom_kind, std::string> strategy{LOOM_KIND_STRATEGY, spec.strategy};
  config.options[strategy] = spec.options;
  for (const auto& [name, value] : spec.options)
    config.option_sources[strategy][name] =
        spec.options_from.empty() ? "option " + name : spec.options_from + "(" + name + "=...)";
  if (!spec.collective_options.empty()) {
    const std::pair<loom_kind, std::string> collective{LOOM_KIND_COLLECTIVE, spec.collective};
    config.options[collective] = spec.collective_options;
    for (const auto& [name, value] : spec.collective_options)
      config.option_sources[collective][name] =
          spec.options_from.empty() ? "collective option " + name
                                    : spec.options_from + "(collective_options={'" + name + "': ...})";
  }
  return config;
}

// What TrainingState does not check itself (it trains where the task put
// the tensors, and its dtypes are checked there).
void check_tensors(const std::vector<NamedTensor>& tensors, const char* what) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error::usage(std::string(what) + " '" + name + "' is undefined");
    if (!t.device().is_cpu())
      throw Error::usage(std::string(what) + " '" + name + "' is on " + t.device().str() +
                         "; an external loop trains on the CPU (valid device: cpu)");
    if (!t.is_contiguous())
      throw Error::usage(std::string(what) + " '" + name + "' is not contiguous; make it so (.contiguous())");
  }
}

// The status names the strategy and the call already (Strategy::result).
Error from_status(const Status& s) {
  return s.code() == LOOM_ERR_INVALID_ARGUMENT ? Error::usage(s.to_string()) : Error::runtime(s.to_string());
}

}  // namespace

ExternalLoop::ExternalLoop(ExternalLoopSpec spec) : spec_(std::move(spec)) {
  if (spec_.params.empty()) throw Error::usage("there are no parameters to train");
  if (spec_.batch_size < 1)
    throw Error::usage("batch size " + std::to_string(spec_.batch_size) +
                       ": it must be at least 1 (the samples of one micro-batch of this process)");
  if (spec_.optimizer != "sgd" && spec_.optimizer != "adam" && spec_.optimizer != "adamw")
    throw Error::usage("optimizer '" + spec_.optimizer + "': valid: sgd, adam, adamw");
  check_tensors(spec_.params, "parameter");
  check_tensors(spec_.buffers, "buffer");
  task_ = std::make_unique<LoopModel>(spec_.task, spec_.params, spec_.buffers);
  TrainerSettings s;
  s.task = spec_.task;
  s.optimizer = spec_.optimizer;
  s.momentum = spec_.momentum;
  s.batch_size = spec_.batch_size;
  s.max_steps = spec_.max_steps;
  if (!spec_.other_optimizer.empty()) {
    if (spec_.optimizer != "sgd" || spec_.momentum != 0)
      throw Error::usage("other_optimizer '" + spec_.other_optimizer + "' needs optimizer sgd without momentum");
  }
  state_ = std::make_unique<TrainingState>(*task_, s);  // checks the dtypes
  if (!spec_.other_optimizer.empty())
    state_->describe_optimizer(spec_.other_optimizer + " (state per parameter: its own, not shared)");
  // The plugin last: what is wrong with the tensors is said without loading it.
  host_ = std::make_unique<Host>(host_config(spec_), JobInfo::from_environment());
  strategy_ = host_->open_strategy(spec_.strategy);
}

ExternalLoop::~ExternalLoop() {
  try {
    teardown();
  } catch (...) {
    // Not from a destructor; the plugin logged why.
  }
}

std::vector<std::vector<torch::Tensor>> ExternalLoop::optimizer_statistics() { return state_->init_optimizer_state(); }

void ExternalLoop::share_step_counters(std::vector<torch::Tensor> counters) {
  if (counters.size() != spec_.params.size())
    throw Error::usage(std::to_string(counters.size()) + " step counters for " + std::to_string(spec_.params.size()) +
                       " parameters");
  state_->share_step_counters(std::move(counters));
}

void ExternalLoop::setup() {
  if (set_up_) return;
  loom_training_state_v1 view = state_->abi_view();
  view.start_step = state_->step;
  Status s = strategy_->setup(view);
  if (!s.is_ok()) {
    if (const Error* cause = strategy_->host_error()) throw *cause;  // e.g. its collective is unavailable
    if (s.code() == LOOM_ERR_UNSUPPORTED) throw Error::usage(s.to_string());
    throw from_status(s);
  }
  set_up_ = true;
}

bool ExternalLoop::after_backward(uint64_t samples, std::optional<double> loss) {
  setup();
  state_->check_views();
  if (loss) state_->set_window_loss(*loss);
  else state_->forget_window_loss();
  bool apply = false;
  Status s = strategy_->after_backward(samples, &apply);
  if (!s.is_ok()) throw from_status(s);
  return apply;
}

void ExternalLoop::after_optimizer_step() {
  Status s = strategy_->after_optimizer_step();
  if (!s.is_ok()) throw from_status(s);
}

bool ExternalLoop::load_state_from_peers(std::string* why) {
  setup();
  Status s = strategy_->load_state();
  if (s.is_ok()) return true;
  if (s.code() == LOOM_ERR_UNSUPPORTED) throw Error::usage(s.message());
  if (s.code() != LOOM_ERR_UNAVAILABLE) throw from_status(s);
  if (why) *why = s.message();
  return false;
}

void ExternalLoop::zero_grads() { state_->zero_grads(); }
bool ExternalLoop::grads_finite() const { return state_->grads_finite(); }
int64_t ExternalLoop::global_step() const { return strategy_->global_step(); }
bool ExternalLoop::should_stop() const { return strategy_->should_stop(); }
std::string ExternalLoop::status_line() const { return strategy_->status_line(); }
std::string ExternalLoop::description() const { return state_->abi_view().description; }

void ExternalLoop::teardown() {
  if (!set_up_ || torn_down_) return;
  torn_down_ = true;
  Status s = strategy_->teardown();
  if (!s.is_ok()) throw from_status(s);
}

}  // namespace loom::train
