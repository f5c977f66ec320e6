// SPDX-License-Identifier: Apache-2.0
#include "loom/strategy.hpp"

#include "strategy_internal.hpp"

namespace loom {

Status Strategy::result(loom_status code, const char* call) const {
  if (code == LOOM_OK) return Status::ok();
  const char* message = vtable_->last_error(ctx_);
  return Status(code, std::string("strategy '") + descriptor_.name + "' " + call + ": " +
                          (message && *message ? message : "failed"));
}

Status Strategy::setup(const loom_training_state_v1& state) { return result(vtable_->setup(ctx_, &state), "setup"); }
Status Strategy::teardown() { return result(vtable_->teardown(ctx_), "teardown"); }
Status Strategy::data_shard(int32_t* index, int32_t* count) {
  return result(vtable_->data_shard(ctx_, index, count), "data_shard");
}
Status Strategy::after_backward(uint64_t local_samples, bool* apply) {
  loom_step_decision decision = LOOM_STEP_ACCUMULATE;
  Status s = result(vtable_->after_backward(ctx_, local_samples, &decision), "after_backward");
  *apply = decision == LOOM_STEP_APPLY;
  return s;
}
Status Strategy::after_optimizer_step() { return result(vtable_->after_optimizer_step(ctx_), "after_optimizer_step"); }
Status Strategy::reduce_metric(double* value, loom_metric_op op) {
  return result(vtable_->reduce_metric(ctx_, value, op), "reduce_metric");
}
Status Strategy::reduce_decision(bool* decision, bool all) {
  int32_t d = *decision ? 1 : 0;
  Status s = result(vtable_->reduce_decision(ctx_, &d, all ? 1 : 0), "reduce_decision");
  *decision = d != 0;
  return s;
}
Status Strategy::barrier() { return result(vtable_->barrier(ctx_), "barrier"); }
Status Strategy::broadcast_bytes(void* data, uint64_t len, int32_t root) {
  return result(vtable_->broadcast_bytes(ctx_, data, len, root), "broadcast_bytes");
}
bool Strategy::is_global_zero() const { return vtable_->is_global_zero(ctx_) != 0; }
int64_t Strategy::global_step() const { return vtable_->global_step(ctx_); }
Status Strategy::load_state() {
  if (vtable_->struct_size < LOOM_STRATEGY_V1_8_SIZE || vtable_->load_state == nullptr)
    return Status(LOOM_ERR_UNSUPPORTED, "strategy '" + descriptor_.name +
                                            "' has nothing to load from other processes (it offers no load_state, "
                                            "ABI 1.8)");
  return result(vtable_->load_state(ctx_), "load_state");
}

uint64_t Strategy::sample_salt() const {
  if (vtable_->struct_size < LOOM_STRATEGY_V1_1_SIZE || vtable_->sample_salt == nullptr) return 0;
  return vtable_->sample_salt(ctx_);
}
bool Strategy::should_stop() const { return vtable_->should_stop(ctx_) != 0; }
std::string Strategy::status_line() const {
  const char* line = vtable_->status_line(ctx_);
  return line ? line : "";
}

namespace {

class HostedStrategy final : public Strategy {
 public:
  HostedStrategy(const LoadedPlugin& plugin, std::unique_ptr<PluginHostContext> services, loom_strategy_ctx* ctx)
      : Strategy(static_cast<const loom_strategy_v1*>(plugin.vtable), ctx, plugin.descriptor, plugin.candidate.path),
        services_(std::move(services)) {}
  ~HostedStrategy() override { vtable_->fini(ctx_); }
  const Error* host_error() const override { return services_->open_error.get(); }

 private:
  std::unique_ptr<PluginHostContext> services_;
};

}  // namespace

std::shared_ptr<Strategy> make_hosted_strategy(const LoadedPlugin& plugin, std::unique_ptr<PluginHostContext> services,
                                               loom_strategy_ctx* ctx) {
  return std::make_shared<HostedStrategy>(plugin, std::move(services), ctx);
}

}  // namespace loom
