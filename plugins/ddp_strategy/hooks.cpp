// SPDX-License-Identifier: Apache-2.0
// The training hooks: gradient averaging after each backward, and the small
// collectives the trainer asks for (metrics, decisions, barrier, bytes).
#include <string>

#include "divide.h"
#include "error.h"
#include "instance.h"

namespace loom_ddp {
namespace {

// Averages the gradients: each bucket is packed (unless its gradients are one
// range already) and its allreduce posted at once, so the transfers of
// earlier buckets overlap the copies of later ones; then each is waited for,
// in order, divided (f32, f64: summed by the collective, see divide.h) and
// unpacked while the later ones are still in flight.
//
// On a device the collective averages (LOOM_REDUCE_AVG: NCCL's ncclAvg) on
// the host's stream, and a bucket that is not one range is reduced member by
// member in place (the trainer's gradients always form one range).
loom_status after_backward_impl(loom_strategy_ctx *ctx, loom_step_decision *decision) {
  LOOM_CXX_TRY(usable(ctx, "after_backward"));
  if (!decision) return fail(LOOM_ERR_INVALID_ARGUMENT, "after_backward: decision is NULL");
  const auto deadline = deadline_after(ctx->timeout_ms);
  const bool on_device = ctx->values.on_device();
  auto reduce_op = [&](const Bucket &b) {
    return divides_here(b.dtype) && !on_device ? LOOM_REDUCE_SUM : LOOM_REDUCE_AVG;
  };
  for (size_t k = 0; k < ctx->buckets.size(); ++k) {
    Bucket &b = ctx->buckets[k];
    loom_status s = LOOM_OK;
    if (on_device && !b.grads_in_place) {
      for (size_t j = 0; j < b.members.size() && s == LOOM_OK; ++j) {
        const TensorRef &g = ctx->grads[b.members[j]];
        s = ctx->group.allreduce(g.data, g.numel, g.dtype, LOOM_REDUCE_AVG, &b.member_ops[j]);
      }
    } else {
      void *buf = b.grads_in_place;
      if (!buf) {
        pack(b, ctx->grads);
        buf = b.flat.data();
      }
      s = ctx->group.allreduce(buf, b.count, b.dtype, reduce_op(b), &b.op);
    }
    if (s != LOOM_OK) return op_failed(ctx, s, "after_backward: allreduce of " + describe_bucket(ctx, k, "gradient"));
  }
  for (size_t k = 0; k < ctx->buckets.size(); ++k) {
    Bucket &b = ctx->buckets[k];
    loom_status s = LOOM_OK;
    if (on_device && !b.grads_in_place) {
      for (size_t j = 0; j < b.members.size() && s == LOOM_OK; ++j) s = ctx->group.wait(b.member_ops[j], deadline);
    } else {
      s = ctx->group.wait(b.op, deadline);
    }
    if (s != LOOM_OK) return op_failed(ctx, s, "after_backward: allreduce of " + describe_bucket(ctx, k, "gradient"));
    if (on_device) continue;
    if (divides_here(b.dtype)) {
      divide_in_place(b.grads_in_place ? b.grads_in_place : b.flat.data(), b.count, b.dtype, ctx->size);
    }
    if (!b.grads_in_place) unpack(b, ctx->grads);
  }
  *decision = LOOM_STEP_APPLY;
  return LOOM_OK;
}

loom_status reduce_metric_impl(loom_strategy_ctx *ctx, double *value, loom_metric_op op) {
  LOOM_CXX_TRY(usable(ctx, "reduce_metric"));
  if (!value) return fail(LOOM_ERR_INVALID_ARGUMENT, "reduce_metric: value is NULL");
  loom_reduce_op reduce;
  const char *name;
  switch (op) {
    case LOOM_METRIC_SUM:
      reduce = LOOM_REDUCE_SUM, name = "sum";
      break;
    case LOOM_METRIC_MEAN:
      reduce = LOOM_REDUCE_SUM, name = "mean";
      break;
    case LOOM_METRIC_MIN:
      reduce = LOOM_REDUCE_MIN, name = "min";
      break;
    case LOOM_METRIC_MAX:
      reduce = LOOM_REDUCE_MAX, name = "max";
      break;
    default:
      return fail(LOOM_ERR_INVALID_ARGUMENT, "reduce_metric: unknown op %d", op);
  }
  double v = *value;
  const loom_status s =
      ctx->values.allreduce(ctx->group, &v, 1, LOOM_DTYPE_F64, reduce, deadline_after(ctx->timeout_ms));
  if (s != LOOM_OK) return failed_on(ctx, s, std::string("reduce_metric: allreduce of one f64 (") + name + ")");
  *value = op == LOOM_METRIC_MEAN ? v / ctx->size : v;
  return LOOM_OK;
}

loom_status reduce_decision_impl(loom_strategy_ctx *ctx, int32_t *decision, int32_t all) {
  LOOM_CXX_TRY(usable(ctx, "reduce_decision"));
  if (!decision) return fail(LOOM_ERR_INVALID_ARGUMENT, "reduce_decision: decision is NULL");
  int32_t v = *decision != 0 ? 1 : 0;
  const loom_reduce_op reduce = all ? LOOM_REDUCE_MIN : LOOM_REDUCE_MAX;
  const loom_status s =
      ctx->values.allreduce(ctx->group, &v, 1, LOOM_DTYPE_I32, reduce, deadline_after(ctx->timeout_ms));
  if (s != LOOM_OK)
    return failed_on(ctx, s,
                     std::string("reduce_decision: allreduce of one i32 (") + (all ? "min, all" : "max, any") + ")");
  *decision = v;
  return LOOM_OK;
}

loom_status barrier_impl(loom_strategy_ctx *ctx) {
  LOOM_CXX_TRY(usable(ctx, "barrier"));
  const loom_status s =
      ctx->group.run([&](size_t *h) { return ctx->group.barrier(h); }, deadline_after(ctx->timeout_ms));
  if (s != LOOM_OK) return op_failed(ctx, s, "barrier");
  return LOOM_OK;
}

loom_status broadcast_bytes_impl(loom_strategy_ctx *ctx, void *data, uint64_t len, int32_t root) {
  LOOM_CXX_TRY(usable(ctx, "broadcast_bytes"));
  if (root < 0 || root >= ctx->size)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "broadcast_bytes: root %d is not a rank of this job (0..%d)", root,
                ctx->size - 1);
  if (len > 0 && !data)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "broadcast_bytes: data is NULL but len is %llu",
                static_cast<unsigned long long>(len));
  if (len == 0) return LOOM_OK;  // len is equal everywhere: nothing to send
  const loom_status s =
      ctx->values.broadcast(ctx->group, data, len, LOOM_DTYPE_U8, root, deadline_after(ctx->timeout_ms));
  if (s != LOOM_OK)
    return failed_on(
        ctx, s, "broadcast_bytes: broadcast of " + std::to_string(len) + " bytes from rank " + std::to_string(root));
  return LOOM_OK;
}

}  // namespace

loom_status after_backward(loom_strategy_ctx *ctx, uint64_t, loom_step_decision *decision) noexcept {
  return guarded([&]() -> loom_status { return after_backward_impl(ctx, decision); });
}

loom_status after_optimizer_step(loom_strategy_ctx *ctx) noexcept {
  return guarded([&]() -> loom_status {
    LOOM_CXX_TRY(usable(ctx, "after_optimizer_step"));
    ++ctx->step;
    return LOOM_OK;
  });
}

loom_status reduce_metric(loom_strategy_ctx *ctx, double *value, loom_metric_op op) noexcept {
  return guarded([&]() -> loom_status { return reduce_metric_impl(ctx, value, op); });
}

loom_status reduce_decision(loom_strategy_ctx *ctx, int32_t *decision, int32_t all) noexcept {
  return guarded([&]() -> loom_status { return reduce_decision_impl(ctx, decision, all); });
}

loom_status barrier(loom_strategy_ctx *ctx) noexcept {
  return guarded([&]() -> loom_status { return barrier_impl(ctx); });
}

loom_status broadcast_bytes(loom_strategy_ctx *ctx, void *data, uint64_t len, int32_t root) noexcept {
  return guarded([&]() -> loom_status { return broadcast_bytes_impl(ctx, data, len, root); });
}

}  // namespace loom_ddp
