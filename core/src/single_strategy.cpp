// SPDX-License-Identifier: Apache-2.0
// The built-in `single` strategy: one process, no communication. Every
// backward is applied at once, metrics are already global, and the global
// step is the local one. Written against the same C vtable as plugins, so the
// trainer has one code path.
#include <cstdio>
#include <cstring>

#include "loom/version.hpp"
#include "strategy_internal.hpp"

struct loom_strategy_ctx {
  int64_t step = 0;
  char status[64] = "single process";
};

namespace loom {
namespace {

loom_status init(const loom_host_v1*, loom_strategy_ctx** ctx, char*, size_t) {
  *ctx = new loom_strategy_ctx();
  return LOOM_OK;
}
void fini(loom_strategy_ctx* ctx) { delete ctx; }
const char* last_error(loom_strategy_ctx*) { return "no error"; }
loom_status setup(loom_strategy_ctx* ctx, const loom_training_state_v1* state) {
  ctx->step = state->start_step;
  return LOOM_OK;
}
loom_status teardown(loom_strategy_ctx*) { return LOOM_OK; }
loom_status data_shard(loom_strategy_ctx*, int32_t* index, int32_t* count) {
  *index = 0;
  *count = 1;
  return LOOM_OK;
}
loom_status after_backward(loom_strategy_ctx*, uint64_t, loom_step_decision* decision) {
  *decision = LOOM_STEP_APPLY;
  return LOOM_OK;
}
loom_status after_optimizer_step(loom_strategy_ctx* ctx) {
  ++ctx->step;
  return LOOM_OK;
}
loom_status reduce_metric(loom_strategy_ctx*, double*, loom_metric_op) { return LOOM_OK; }
loom_status reduce_decision(loom_strategy_ctx*, int32_t*, int32_t) { return LOOM_OK; }
loom_status barrier(loom_strategy_ctx*) { return LOOM_OK; }
loom_status broadcast_bytes(loom_strategy_ctx*, void*, uint64_t, int32_t root) {
  return root == 0 ? LOOM_OK : LOOM_ERR_INVALID_ARGUMENT;
}
int32_t is_global_zero(loom_strategy_ctx*) { return 1; }
int64_t global_step(loom_strategy_ctx* ctx) { return ctx->step; }
int32_t should_stop(loom_strategy_ctx*) { return 0; }
const char* status_line(loom_strategy_ctx* ctx) { return ctx->status; }

const loom_plugin_info kInfo = {sizeof(loom_plugin_info), LOOM_KIND_STRATEGY, "single", LOOM_VERSION_STRING,
                                "One process, no communication (the default)",
                                LOOM_CAP_DEVICE_MEMORY,  // it never touches the tensors
                                nullptr, 0};

const loom_strategy_v1 kVtable = {sizeof(loom_strategy_v1), LOOM_ABI_VERSION, &kInfo, init, fini, last_error,
                                  setup, teardown, data_shard, after_backward, after_optimizer_step, reduce_metric,
                                  reduce_decision, barrier, broadcast_bytes, is_global_zero, global_step,
                                  should_stop, status_line, /*sample_salt=*/nullptr, /*load_state=*/nullptr};

}  // namespace

LoadedPlugin builtin_single_strategy() {
  LoadedPlugin p;
  p.candidate = {"(built into libloom)", "single", LOOM_KIND_STRATEGY, "built in"};
  p.descriptor.name = "single";
  p.descriptor.version = LOOM_VERSION_STRING;
  p.descriptor.description = kInfo.description;
  p.descriptor.abi_version = LOOM_ABI_VERSION;
  p.descriptor.vtable_abi_version = LOOM_ABI_VERSION;
  p.vtable = &kVtable;
  return p;
}

}  // namespace loom
