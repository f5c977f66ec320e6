// SPDX-License-Identifier: Apache-2.0
// The exported symbol, the static info and vtable, and the C functions that
// forward to the Peer. No exception crosses the C ABI.
#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>

#include "loom/cxx/strategy.hpp"
#include "options.h"
#include "peer.h"

struct loom_strategy_ctx {
  const loom_host_v1 *host = nullptr;
  loom_collab::Options options;
  const loom_collective_v1 *collective = nullptr;
  void *collective_instance = nullptr;
  std::unique_ptr<loom_collab::Peer> peer;
  std::string error;
  std::string status;
};

namespace loom_collab {
namespace {

loom_status fail(loom_strategy_ctx *ctx, loom_status s, const std::string &message) {
  ctx->error = message;
  return s;
}

template <class Body>
loom_status guarded(loom_strategy_ctx *ctx, Body &&body) noexcept {
  try {
    return static_cast<loom_status>(body());
  } catch (const std::bad_alloc &) {
    return fail(ctx, LOOM_ERR_SYSTEM, "collab: out of memory");
  } catch (const std::exception &e) {
    return fail(ctx, LOOM_ERR_INTERNAL, std::string("collab: unexpected exception: ") + e.what());
  } catch (...) {
    return fail(ctx, LOOM_ERR_INTERNAL, "collab: unexpected exception of unknown type");
  }
}

void write_why(char *why, size_t len, const std::string &text) {
  if (why && len) std::snprintf(why, len, "%s", text.c_str());
}

loom_status init(const loom_host_v1 *host, loom_strategy_ctx **out, char *why, size_t why_len) noexcept {
  if (!out || !host) return LOOM_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  try {
    auto ctx = std::make_unique<loom_strategy_ctx>();
    ctx->host = host;
    std::string reason;
    if (!read_options(host, &ctx->options, &reason)) {
      write_why(why, why_len, reason);
      return LOOM_ERR_INVALID_ARGUMENT;
    }
    const void *vt = nullptr;
    loom_status s = host->open_plugin(host->host_ctx, LOOM_KIND_COLLECTIVE, ctx->options.collective.c_str(), &vt,
                                      &ctx->collective_instance);
    if (s != LOOM_OK) {
      write_why(why, why_len, "could not open the collective plugin '" + ctx->options.collective + "' (" +
                                  loom_status_name(s) + ")");
      return s == LOOM_ERR_UNAVAILABLE ? s : LOOM_ERR_INVALID_ARGUMENT;
    }
    ctx->collective = static_cast<const loom_collective_v1 *>(vt);
    if (!(ctx->collective->info->capabilities & LOOM_CAP_DYNAMIC_GROUPS)) {
      host->close_plugin(host->host_ctx, ctx->collective_instance);
      write_why(why, why_len, "collective '" + ctx->options.collective +
                                  "' cannot build communicators from any set of peers (no dynamic-groups capability); "
                                  "choose one that can, e.g. collective = \"ucx\"");
      return LOOM_ERR_INVALID_ARGUMENT;
    }
    // ABI 1.7: the operations a round uses must all be there.
    const uint64_t needed = LOOM_OP_ALLREDUCE | LOOM_OP_ALLGATHER | LOOM_OP_ALLTOALL | LOOM_OP_BARRIER |
                            (ctx->options.balance_bandwidth ? LOOM_OP_SEND_RECV : 0);
    if (ctx->collective->struct_size >= LOOM_COLLECTIVE_V1_7_SIZE && (ctx->collective->absent_ops & needed)) {
      host->close_plugin(host->host_ctx, ctx->collective_instance);
      write_why(why, why_len, "collective '" + ctx->options.collective +
                                  "' leaves out operations a swarm round needs (allreduce, allgather, alltoall and "
                                  "barrier, and send and recv with balance_bandwidth); choose one that offers them, "
                                  "e.g. collective = \"ucx\"");
      return LOOM_ERR_INVALID_ARGUMENT;
    }
    *out = ctx.release();
    return LOOM_OK;
  } catch (const std::exception &e) {
    write_why(why, why_len, std::string("collab: ") + e.what());
    return LOOM_ERR_INTERNAL;
  }
}

void fini(loom_strategy_ctx *ctx) noexcept {
  if (!ctx) return;
  try {
    ctx->peer.reset();
  } catch (...) {
  }
  if (ctx->collective_instance) ctx->host->close_plugin(ctx->host->host_ctx, ctx->collective_instance);
  delete ctx;
}

const char *last_error(loom_strategy_ctx *ctx) noexcept { return ctx ? ctx->error.c_str() : "no strategy instance"; }

loom_status setup(loom_strategy_ctx *ctx, const loom_training_state_v1 *state) noexcept {
  if (!ctx || !state) return LOOM_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> loom_status {
    ctx->peer = std::make_unique<Peer>(ctx->host, ctx->options, ctx->collective,
                                       static_cast<loom_collective_ctx *>(ctx->collective_instance));
    std::string why;
    loom_status s = ctx->peer->setup(*state, &why);
    if (s != LOOM_OK) {
      ctx->peer.reset();
      return fail(ctx, s, "collab: " + why);
    }
    return LOOM_OK;
  });
}

loom_status teardown(loom_strategy_ctx *ctx) noexcept {
  if (!ctx) return LOOM_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> loom_status {
    if (ctx->peer) ctx->peer->teardown();
    ctx->peer.reset();
    return LOOM_OK;
  });
}

loom_status data_shard(loom_strategy_ctx *, int32_t *index, int32_t *count) noexcept {
  *index = 0;  // each peer samples the whole data set on its own (see sample_salt)
  *count = 1;
  return LOOM_OK;
}

// A call into the set-up peer: call(why) -> status, its failure reported
// with the peer's words.
template <class Call>
loom_status peer_call(loom_strategy_ctx *ctx, Call call) noexcept {
  if (!ctx || !ctx->peer) return LOOM_ERR_INVALID_ARGUMENT;
  return guarded(ctx, [&]() -> loom_status {
    std::string why;
    loom_status s = call(&why);
    return s == LOOM_OK ? s : fail(ctx, s, "collab: " + why);
  });
}

loom_status after_backward(loom_strategy_ctx *ctx, uint64_t samples, loom_step_decision *decision) noexcept {
  if (!decision) return LOOM_ERR_INVALID_ARGUMENT;
  return peer_call(ctx, [&](std::string *why) { return ctx->peer->after_backward(samples, decision, why); });
}

loom_status after_optimizer_step(loom_strategy_ctx *ctx) noexcept {
  return peer_call(ctx, [&](std::string *why) { return ctx->peer->after_optimizer_step(why); });
}

// Metrics, decisions, barriers and broadcasts are per peer: every peer is its
// own global zero (Lightning's CollaborativeStrategy does the same).
loom_status reduce_metric(loom_strategy_ctx *, double *, loom_metric_op) noexcept { return LOOM_OK; }
loom_status reduce_decision(loom_strategy_ctx *, int32_t *, int32_t) noexcept { return LOOM_OK; }
loom_status barrier(loom_strategy_ctx *) noexcept { return LOOM_OK; }
loom_status broadcast_bytes(loom_strategy_ctx *, void *, uint64_t, int32_t) noexcept { return LOOM_OK; }
int32_t is_global_zero(loom_strategy_ctx *) noexcept { return 1; }
int64_t global_step(loom_strategy_ctx *ctx) noexcept { return ctx && ctx->peer ? ctx->peer->global_step() : 0; }
int32_t should_stop(loom_strategy_ctx *ctx) noexcept { return ctx && ctx->peer && ctx->peer->finished() ? 1 : 0; }

const char *status_line(loom_strategy_ctx *ctx) noexcept {
  if (!ctx) return "";
  try {
    ctx->status = ctx->peer ? ctx->peer->status_line() : "not set up";
  } catch (...) {
    ctx->status = "?";
  }
  return ctx->status.c_str();
}

uint64_t sample_salt(loom_strategy_ctx *ctx) noexcept { return ctx && ctx->peer ? ctx->peer->id() : 0; }

loom_status load_state(loom_strategy_ctx *ctx) noexcept {
  return peer_call(ctx, [&](std::string *why) { return ctx->peer->load_newest(why); });
}

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_STRATEGY,
    "collab",
    "0.1.0",
    "Collaborative training across peers that join and leave at will (DHT discovery, swarm-wide epochs).",
    LOOM_CAP_HEALS_NONFINITE,  // a diverged peer contributes nothing and reloads the swarm's state
    kOptions,
    kNumOptions,
};

// ABI 1.1's sample_salt and 1.8's load_state on top of the 1.0 functions.
constexpr loom_strategy_v1 kVtable = [] {
  loom_strategy_v1 v = LOOM_CXX_STRATEGY_VTABLE(&kInfo);
  v.sample_salt = sample_salt;
  v.load_state = load_state;
  return v;
}();

}  // namespace
}  // namespace loom_collab

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or open a collective.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(const loom_negotiate_request *request,
                                                                  loom_negotiate_reply *reply) {
  // It needs 1.1: the last epoch (max_steps) and per-peer sampling (sample_salt).
  static constexpr loom::cxx::Refusals kRefusals = {
      "collab strategy plugin: the negotiate request is missing or too small for ABI v1",
      "collab strategy plugin: called for a kind other than strategy",
      "collab strategy plugin speaks Loom ABI 1.1 (it needs max_steps and sample_salt)"};
  return loom::cxx::negotiate(request, reply, LOOM_KIND_STRATEGY, LOOM_ABI_MAKE(1, 1), &loom_collab::kVtable,
                              kRefusals);
}
