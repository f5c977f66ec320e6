// SPDX-License-Identifier: Apache-2.0
// setup: check the lent state, build the buckets, open the collective, make
// sure every rank trains the same model, and give every rank rank 0's
// parameters. teardown undoes it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "error.h"
#include "instance.h"

namespace loom_ddp {
namespace {

// FNV-1a, 64 bits: a fingerprint of the parameters' dtypes and shapes.
class Fingerprint {
 public:
  void add(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xffu;
      hash_ *= 1099511628211ull;
    }
  }
  int64_t value() const { return static_cast<int64_t>(hash_); }

 private:
  uint64_t hash_ = 1469598103934665603ull;
};

loom_status read_state(loom_strategy_ctx *ctx, const loom_training_state_v1 *state) {
  if (!state) return fail(LOOM_ERR_INVALID_ARGUMENT, "setup: state is NULL");
  if (state->struct_size < offsetof(loom_training_state_v1, grads) + sizeof state->grads)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "setup: state struct_size %u is too small for its tensors",
                state->struct_size);
  std::memset(&ctx->state, 0, sizeof ctx->state);
  std::memcpy(&ctx->state, state, std::min<size_t>(state->struct_size, sizeof ctx->state));
  const loom_training_state_v1 &st = ctx->state;
  if (st.num_params > 0 && (!st.params || !st.grads))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "setup: state has %u parameters but %s is NULL", st.num_params,
                st.params ? "grads" : "params");
  // Hosts before ABI 1.6 lend host memory only.
  ctx->device = st.struct_size >= LOOM_TRAINING_STATE_V1_6_SIZE ? st.device : DLDevice{kDLCPU, 0};
  if (ctx->device.device_type != kDLCPU && ctx->device.device_type != kDLCUDA) {
    char name[48];
    return fail(LOOM_ERR_UNSUPPORTED, "the training state lives on %s; the ddp strategy trains on the CPU and on CUDA",
                device_name(ctx->device, name, sizeof name));
  }
  ctx->params.assign(st.num_params, TensorRef{});
  ctx->grads.assign(st.num_params, TensorRef{});
  for (uint32_t i = 0; i < st.num_params; ++i) {
    LOOM_CXX_TRY(view_tensor(st.params[i], "parameter", i, ctx->device, &ctx->params[i]));
    LOOM_CXX_TRY(view_tensor(st.grads[i], "gradient", i, ctx->device, &ctx->grads[i]));
    const TensorRef &p = ctx->params[i], &g = ctx->grads[i];
    if (p.dtype != g.dtype || p.numel != g.numel)
      return fail(LOOM_ERR_INVALID_ARGUMENT,
                  "gradient %u (%s, %llu elements) does not match its parameter (%s, %llu elements)", i,
                  dtype_name(g.dtype), static_cast<unsigned long long>(g.numel), dtype_name(p.dtype),
                  static_cast<unsigned long long>(p.numel));
  }
  return LOOM_OK;
}

// Every rank must average the same buckets in the same order: compares the
// parameter layout and the bucket size across ranks (MIN and MAX of each).
loom_status check_agreement(loom_strategy_ctx *ctx, uint64_t cap_bytes, Clock::time_point deadline) {
  enum { kParams, kElements, kLayout, kCap, kN };
  static const char *const kWhat[kN] = {"the number of parameter tensors", "the number of parameter elements",
                                        "the parameters' shapes or dtypes", "option bucket_mb (in bytes)"};
  Fingerprint layout;
  int64_t elements = 0;
  for (uint32_t i = 0; i < ctx->state.num_params; ++i) {
    const DLTensor &t = ctx->state.params[i];
    layout.add(ctx->params[i].dtype);
    layout.add(t.ndim);
    for (int d = 0; d < t.ndim; ++d) layout.add(t.shape[d]);
    elements += static_cast<int64_t>(ctx->params[i].numel);
  }
  const int64_t mine[kN] = {ctx->state.num_params, elements, layout.value(), static_cast<int64_t>(cap_bytes)};
  int64_t lo[kN], hi[kN];
  std::memcpy(lo, mine, sizeof lo);
  std::memcpy(hi, mine, sizeof hi);
  loom_status s = ctx->values.allreduce(ctx->group, lo, kN, LOOM_DTYPE_I64, LOOM_REDUCE_MIN, deadline);
  if (s == LOOM_OK) s = ctx->values.allreduce(ctx->group, hi, kN, LOOM_DTYPE_I64, LOOM_REDUCE_MAX, deadline);
  if (s != LOOM_OK) return failed_on(ctx, s, "setup: allreduce of the model's fingerprint");
  for (int i = 0; i < kN; ++i) {
    if (lo[i] == hi[i]) continue;
    if (i == kLayout)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "the ranks do not train the same model: %s differ", kWhat[i]);
    return fail(LOOM_ERR_INVALID_ARGUMENT,
                "the ranks do not agree on %s: it ranges from %lld to %lld (this rank: %lld)", kWhat[i],
                static_cast<long long>(lo[i]), static_cast<long long>(hi[i]), static_cast<long long>(mine[i]));
  }
  return LOOM_OK;
}

// On a device: rank 0's parameters tensor by tensor, in place, all in
// flight at once (there is no flat copy there).
loom_status broadcast_device_params(loom_strategy_ctx *ctx, Clock::time_point deadline) {
  std::vector<size_t> ops(ctx->params.size());
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    const TensorRef &p = ctx->params[i];
    if (p.numel == 0) continue;
    const loom_status s = ctx->group.broadcast(p.data, p.numel, p.dtype, 0, &ops[i]);
    if (s != LOOM_OK) return op_failed(ctx, s, "setup: broadcast of parameter " + std::to_string(i));
  }
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    if (ctx->params[i].numel == 0) continue;
    const loom_status s = ctx->group.wait(ops[i], deadline);
    if (s != LOOM_OK) return op_failed(ctx, s, "setup: broadcast of parameter " + std::to_string(i));
  }
  return LOOM_OK;
}

// Copies rank 0's parameters to every rank, bucket by bucket, all buckets in
// flight at once.
loom_status broadcast_params(loom_strategy_ctx *ctx, Clock::time_point deadline) {
  if (ctx->values.on_device()) return broadcast_device_params(ctx, deadline);
  const bool root = ctx->rank == 0;
  for (size_t k = 0; k < ctx->buckets.size(); ++k) {
    Bucket &b = ctx->buckets[k];
    void *buf = b.params_in_place;
    if (!buf) {
      if (root) pack(b, ctx->params);
      buf = b.flat.data();
    }
    const loom_status s = ctx->group.broadcast(buf, b.count, b.dtype, 0, &b.op);
    if (s != LOOM_OK) return op_failed(ctx, s, "setup: broadcast of " + describe_bucket(ctx, k, "parameter"));
  }
  for (size_t k = 0; k < ctx->buckets.size(); ++k) {
    Bucket &b = ctx->buckets[k];
    const loom_status s = ctx->group.wait(b.op, deadline);
    if (s != LOOM_OK) return op_failed(ctx, s, "setup: broadcast of " + describe_bucket(ctx, k, "parameter"));
    if (!b.params_in_place && !root) unpack(b, ctx->params);
    if (b.grads_in_place) std::vector<unsigned char>().swap(b.flat);  // only the parameters needed it
  }
  return LOOM_OK;
}

// Copies rank 0's buffers (BatchNorm statistics; ABI 1.4) to every rank.
// Their layout was part of the model check only through the parameters, so
// the count is compared first.
loom_status broadcast_buffers(loom_strategy_ctx *ctx, Clock::time_point deadline, uint32_t *broadcast) {
  *broadcast = 0;
  const loom_training_state_v1 &st = ctx->state;
  if (st.struct_size < LOOM_TRAINING_STATE_V1_4_SIZE || st.buffers == nullptr) return LOOM_OK;
  const DLTensor *tensors = nullptr;
  uint32_t count = 0;
  if (st.buffers(st.user, &tensors, &count) != LOOM_OK)
    return fail(LOOM_ERR_INTERNAL, "setup: the host could not lend the model's buffers");
  std::vector<TensorRef> refs(count);
  int64_t elements = 0;
  for (uint32_t i = 0; i < count; ++i) {
    LOOM_CXX_TRY(view_tensor(tensors[i], "buffer", i, ctx->device, &refs[i]));
    elements += static_cast<int64_t>(refs[i].numel);
  }
  int64_t extent[2] = {elements, -elements};  // max(n) and max(-n): do all ranks agree?
  loom_status s = ctx->values.allreduce(ctx->group, extent, 2, LOOM_DTYPE_I64, LOOM_REDUCE_MAX, deadline);
  if (s != LOOM_OK) return failed_on(ctx, s, "setup: allreduce of the buffers' size");
  if (extent[0] != -extent[1])
    return fail(LOOM_ERR_INVALID_ARGUMENT, "the ranks do not train the same model: their buffers hold %lld to %lld values",
                static_cast<long long>(-extent[1]), static_cast<long long>(extent[0]));
  std::vector<size_t> ops(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (refs[i].numel == 0) continue;
    s = ctx->group.broadcast(refs[i].data, refs[i].numel, refs[i].dtype, 0, &ops[i]);
    if (s != LOOM_OK) return op_failed(ctx, s, "setup: broadcast of buffer " + std::to_string(i));
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (refs[i].numel == 0) continue;
    s = ctx->group.wait(ops[i], deadline);
    if (s != LOOM_OK) return op_failed(ctx, s, "setup: broadcast of buffer " + std::to_string(i));
  }
  *broadcast = count;
  return LOOM_OK;
}

loom_status setup_impl(loom_strategy_ctx *ctx, const loom_training_state_v1 *state) {
  if (!ctx) return fail(LOOM_ERR_INVALID_ARGUMENT, "setup: ctx is NULL");
  if (ctx->set_up) return fail(LOOM_ERR_INVALID_ARGUMENT, "setup called twice without teardown");
  // Everything that can fail locally fails before any rank talks to another.
  loom_status s = read_state(ctx, state);
  const auto cap_bytes = static_cast<uint64_t>(std::max(1.0, std::round(ctx->bucket_mb * 1024 * 1024)));
  if (s == LOOM_OK) s = ctx->values.open(ctx->state);
  if (s == LOOM_OK) {
    ctx->buckets = assign_buckets(ctx->grads, cap_bytes);
    ctx->bucketed_bytes = 0;
    for (Bucket &b : ctx->buckets) {
      prepare(b, ctx->params, ctx->grads, ctx->values.on_device());
      ctx->bucketed_bytes += b.bytes();
    }
    s = ctx->group.open(&ctx->host, ctx->collective.c_str(), ctx->rank, ctx->size, ctx->timeout_ms, ctx->device,
                        ctx->values.on_device() ? ctx->state.stream : nullptr);
  }
  if (s != LOOM_OK) {
    ctx->values.close();
    ctx->buckets.clear();
    ctx->params.clear();
    ctx->grads.clear();
    return s;
  }
  ctx->set_up = true;
  ctx->failure.clear();
  const auto deadline = deadline_after(ctx->timeout_ms);
  s = check_agreement(ctx, cap_bytes, deadline);
  if (s == LOOM_OK) s = broadcast_params(ctx, deadline);
  uint32_t buffers = 0;
  if (s == LOOM_OK) s = broadcast_buffers(ctx, deadline, &buffers);
  if (s != LOOM_OK) {
    const std::string why = last_error_text();
    release(ctx);
    return fail(s, "%s", why.c_str());
  }
  ctx->step = ctx->state.start_step;

  size_t copied = 0;
  for (const Bucket &b : ctx->buckets) copied += b.grads_in_place ? 0 : 1;
  char where[48];
  host_log(ctx, ctx->rank == 0 ? LOOM_LOG_INFO : LOOM_LOG_DEBUG,
           "ddp over collective '%s' on %s: %d rank%s, %u parameter tensors (%.2f MiB of gradients) in %zu bucket%s "
           "of about %s (%zu averaged in place, %zu %s); parameters and %u buffer%s broadcast from rank 0",
           ctx->collective.c_str(), device_name(ctx->device, where, sizeof where), ctx->size, ctx->size == 1 ? "" : "s",
           ctx->state.num_params,
           double(ctx->bucketed_bytes) / (1 << 20), ctx->buckets.size(), ctx->buckets.size() == 1 ? "" : "s",
           bucket_size_text(ctx->bucket_mb).c_str(), ctx->buckets.size() - copied, copied,
           ctx->values.on_device() ? "tensor by tensor" : "through a flat copy", buffers, buffers == 1 ? "" : "s");
  for (size_t k = 0; k < ctx->buckets.size(); ++k)
    host_log(ctx, LOOM_LOG_DEBUG, "%s%s", describe_bucket(ctx, k, "gradient").c_str(),
             ctx->buckets[k].grads_in_place ? ", in place" : "");
  return LOOM_OK;
}

}  // namespace

loom_status release(loom_strategy_ctx *ctx) {
  const loom_status s = ctx->group.close();
  ctx->values.close();
  ctx->buckets.clear();
  ctx->params.clear();
  ctx->grads.clear();
  ctx->set_up = false;
  return s;
}

loom_status setup(loom_strategy_ctx *ctx, const loom_training_state_v1 *state) noexcept {
  return guarded([&]() -> loom_status { return setup_impl(ctx, state); });
}

loom_status teardown(loom_strategy_ctx *ctx) noexcept {
  return guarded([&]() -> loom_status {
    if (!ctx) return fail(LOOM_ERR_INVALID_ARGUMENT, "teardown: ctx is NULL");
    if (!ctx->set_up) return LOOM_OK;
    const loom_status s = release(ctx);
    if (s != LOOM_OK)
      return fail(s, "teardown: destroying the communicator of collective '%s' failed: %s", ctx->collective.c_str(),
                  ctx->group.detail().c_str());
    return LOOM_OK;
  });
}

}  // namespace loom_ddp
