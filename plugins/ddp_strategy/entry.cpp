// SPDX-License-Identifier: Apache-2.0
// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "instance.h"
#include "loom/strategy.h"
#include "options.h"
#include "../common/negotiate.h"

namespace loom_ddp {
namespace {

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_STRATEGY,
    "ddp",
    "0.1.0",
    "Synchronous data parallelism: rank 0's parameters broadcast, gradients averaged in buckets over a collective.",
    LOOM_CAP_DEVICE_MEMORY,  // CUDA tensors over a CUDA collective (nccl), on the host's stream
    kOptions,
    kNumOptions,
};

constexpr loom_strategy_v1 make_vtable() {
  loom_strategy_v1 v{};
  v.struct_size = sizeof(loom_strategy_v1);
  v.abi_version = LOOM_ABI_VERSION;
  v.info = &kInfo;
  v.init = init;
  v.fini = fini;
  v.last_error = last_error;
  v.setup = setup;
  v.teardown = teardown;
  v.data_shard = data_shard;
  v.after_backward = after_backward;
  v.after_optimizer_step = after_optimizer_step;
  v.reduce_metric = reduce_metric;
  v.reduce_decision = reduce_decision;
  v.barrier = barrier;
  v.broadcast_bytes = broadcast_bytes;
  v.is_global_zero = is_global_zero;
  v.global_step = global_step;
  v.should_stop = should_stop;
  v.status_line = status_line;
  return v;
}

constexpr loom_strategy_v1 kVtable = make_vtable();


}  // namespace
}  // namespace loom_ddp

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or open a collective.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(const loom_negotiate_request *request,
                                                                  loom_negotiate_reply *reply) {
  static constexpr loom_plugin_common::Refusals kRefusals = {
      "ddp strategy plugin: the negotiate request is missing or too small for ABI v1",
      "ddp strategy plugin: called for a kind other than strategy",
      "ddp strategy plugin speaks Loom ABI " LOOM_PLUGIN_ABI_RANGE};
  return loom_plugin_common::negotiate(request, reply, LOOM_KIND_STRATEGY, LOOM_ABI_VERSION_MIN, &loom_ddp::kVtable,
                                kRefusals);
}
