// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "instance.h"
#include "loom/strategy.h"
#include "options.h"

namespace loom_ddp {
namespace {

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_STRATEGY,
    "ddp",
    "0.1.0",
    "Synchronous data parallelism: rank 0's parameters broadcast, gradients averaged in buckets over a collective.",
    0,  // no strategy capability bits are defined yet
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

// Whether the host's reply struct has room for field.
#define REPLY_HAS(reply, field) ((reply)->struct_size >= offsetof(loom_negotiate_reply, field) + sizeof((reply)->field))

loom_status answer(loom_negotiate_reply *reply, loom_status s, const void *vtable, const char *refusal) {
  if (REPLY_HAS(reply, abi_version)) reply->abi_version = vtable ? LOOM_ABI_VERSION : 0;
  if (REPLY_HAS(reply, vtable)) reply->vtable = vtable;
  if (REPLY_HAS(reply, refusal)) reply->refusal = refusal;
  return s;
}

}  // namespace
}  // namespace loom_ddp

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or open a collective.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(const loom_negotiate_request *request,
                                                                  loom_negotiate_reply *reply) {
  using loom_ddp::answer;
  if (!reply) return LOOM_ERR_INVALID_ARGUMENT;
  if (!request || request->struct_size < sizeof(loom_negotiate_request))
    return answer(reply, LOOM_ERR_UNSUPPORTED, nullptr,
                  "ddp strategy plugin: the negotiate request is missing or too small for ABI v1");
  if (request->kind != LOOM_KIND_STRATEGY)
    return answer(reply, LOOM_ERR_UNSUPPORTED, nullptr, "ddp strategy plugin: called for a kind other than strategy");
  if (request->abi_min > LOOM_ABI_VERSION || request->abi_max < LOOM_ABI_VERSION)
    return answer(reply, LOOM_ERR_UNSUPPORTED, nullptr,
                  "ddp strategy plugin speaks Loom ABI 1.0 only (version 0x00010000)");
  return answer(reply, LOOM_OK, &loom_ddp::kVtable, nullptr);
}
