// SPDX-License-Identifier: Apache-2.0
// init / fini, the options, and the functions that only read the instance.
#include "instance.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "error.h"
#include "loom/cxx/options.hpp"
#include "options.h"

namespace loom_ddp {
namespace {

loom_status read_options(loom_strategy_ctx &c) {
  const loom::cxx::Options o(c.host);
  LOOM_CXX_TRY(o.get_string(kOptions[kOptCollective], &c.collective, "name a collective plugin such as mpi"));
  LOOM_CXX_TRY(o.get_double(kOptions[kOptBucketMb], 0, 1024 * 1024, &c.bucket_mb));
  LOOM_CXX_TRY(o.get_int(kOptions[kOptTimeoutMs], 1, &c.timeout_ms));
  return LOOM_OK;
}

loom_status init_impl(const loom_host_v1 *host, loom_strategy_ctx **out) {
  if (!host || !out) return fail(LOOM_ERR_INVALID_ARGUMENT, "init: host and ctx must not be NULL");
  auto c = std::make_unique<loom_strategy_ctx>();
  c->host = loom::cxx::copy_host(*host);  // what the host filled in; the rest "unknown"
  LOOM_CXX_TRY(read_options(*c));
  if (c->host.world_size < 1 || c->host.rank < 0 || c->host.rank >= c->host.world_size)
    return fail(LOOM_ERR_UNAVAILABLE,
                "the host does not know this process's place in the job (rank %d, world size %d); start it with "
                "mpirun or loom launch",
                c->host.rank, c->host.world_size);
  if (!c->host.open_plugin || !c->host.close_plugin)
    return fail(LOOM_ERR_UNAVAILABLE,
                "the host offers no open_plugin service, so the ddp strategy cannot reach "
                "collective plugin '%s'",
                c->collective.c_str());
  c->rank = c->host.rank;
  c->size = c->host.world_size;
  *out = c.release();
  return LOOM_OK;
}

}  // namespace

loom_status usable(loom_strategy_ctx *ctx, const char *call) {
  if (!ctx) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", call);
  if (!ctx->set_up) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s called before setup or after teardown", call);
  if (ctx->group.broken() != LOOM_OK)
    return fail(ctx->group.broken(), "%s: the ddp group over collective '%s' is unusable since an earlier failure: %s",
                call, ctx->collective.c_str(), ctx->failure.c_str());
  return LOOM_OK;
}

loom_status op_failed(loom_strategy_ctx *ctx, loom_status s, const std::string &what) {
  ctx->failure =
      what + " over collective '" + ctx->collective + "' failed (" + loom_status_name(s) + "): " + ctx->group.detail();
  host_log(ctx, LOOM_LOG_DEBUG, "%s; the communicator was aborted", ctx->failure.c_str());
  return fail(s, "%s", ctx->failure.c_str());
}

loom_status failed_on(loom_strategy_ctx *ctx, loom_status s, const std::string &what) {
  if (ctx->group.broken() != LOOM_OK) return op_failed(ctx, s, what);
  const std::string why = last_error_text();
  return fail(s, "%s: %s", what.c_str(), why.c_str());
}

std::string bucket_size_text(double bucket_mb) {
  char text[64];
  std::snprintf(text, sizeof text, bucket_mb >= 0.1 ? "%.1f MiB" : "%.3g MiB", bucket_mb);
  return text;
}

std::string describe_bucket(const loom_strategy_ctx *ctx, size_t k, const char *kind) {
  const Bucket &b = ctx->buckets[k];
  const auto [lo, hi] = std::minmax_element(b.members.begin(), b.members.end());
  char size[32], text[256];
  if (b.bytes() < 1024)
    std::snprintf(size, sizeof size, "%llu bytes", static_cast<unsigned long long>(b.bytes()));
  else if (b.bytes() < 1024 * 1024)
    std::snprintf(size, sizeof size, "%.1f KiB", double(b.bytes()) / 1024);
  else
    std::snprintf(size, sizeof size, "%.2f MiB", double(b.bytes()) / (1 << 20));
  std::snprintf(text, sizeof text, "%s bucket %zu of %zu (%s, %s, %zu tensor%s of parameters %u..%u)", kind, k + 1,
                ctx->buckets.size(), dtype_name(b.dtype), size, b.members.size(), b.members.size() == 1 ? "" : "s", *lo,
                *hi);
  return text;
}

loom_status init(const loom_host_v1 *host, loom_strategy_ctx **ctx, char *why, size_t why_len) noexcept {
  return loom::cxx::guarded_init(ctx, why, why_len, [&] { return init_impl(host, ctx); });
}

void fini(loom_strategy_ctx *ctx) noexcept {
  if (!ctx) return;
  guarded([&]() -> loom_status {
    if (ctx->set_up) {
      host_log(ctx, LOOM_LOG_WARN, "fini called without teardown; tearing down now");
      release(ctx);
    }
    return LOOM_OK;
  });
  delete ctx;
}

const char *last_error(loom_strategy_ctx *) noexcept { return last_error_text(); }

loom_status data_shard(loom_strategy_ctx *ctx, int32_t *index, int32_t *count) noexcept {
  if (!ctx || !index || !count)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "data_shard: ctx, index and count must not be NULL");
  *index = ctx->rank;
  *count = ctx->size;
  return LOOM_OK;
}

int32_t is_global_zero(loom_strategy_ctx *ctx) noexcept { return ctx && ctx->rank == 0 ? 1 : 0; }

int64_t global_step(loom_strategy_ctx *ctx) noexcept { return ctx ? ctx->step : 0; }

int32_t should_stop(loom_strategy_ctx *) noexcept { return 0; }

const char *status_line(loom_strategy_ctx *ctx) noexcept {
  if (!ctx) return "ddp (no instance)";
  const loom_status s = guarded([&]() -> loom_status {
    char line[256];
    if (!ctx->set_up) {
      std::snprintf(line, sizeof line, "ddp over %s, %d ranks (not set up)", ctx->collective.c_str(), ctx->size);
    } else if (ctx->group.broken() != LOOM_OK) {
      std::snprintf(line, sizeof line, "ddp over %s, %d ranks: failed (%s)", ctx->collective.c_str(), ctx->size,
                    loom_status_name(ctx->group.broken()));
    } else {
      std::snprintf(line, sizeof line, "ddp over %s, %d rank%s, %zu bucket%s (%s)", ctx->collective.c_str(), ctx->size,
                    ctx->size == 1 ? "" : "s", ctx->buckets.size(), ctx->buckets.size() == 1 ? "" : "s",
                    bucket_size_text(ctx->bucket_mb).c_str());
    }
    ctx->status = line;
    return LOOM_OK;
  });
  return s == LOOM_OK ? ctx->status.c_str() : "ddp";
}

}  // namespace loom_ddp
