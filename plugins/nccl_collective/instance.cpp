// SPDX-License-Identifier: Apache-2.0
// init / fini: reads the options and finds out whether this process can use
// CUDA at all. libcudart loads the driver lazily, so the plugin always loads;
// a machine without a GPU or driver gets UNAVAILABLE here, with CUDA's reason.
#include "instance.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "error.h"
#include "options.h"

namespace loom_nccl {
namespace {

// Reads a declared integer option >= min_value; falls back to the declared
// default (with a warning) when the host cannot answer.
loom_status read_int_option(const loom_collective_ctx &c, const loom_option_decl &decl, int64_t min_value,
                            int64_t *out) {
  const char *text = decl.default_value;
  if (c.host.get_option) {
    const char *value = nullptr;
    const loom_status s = c.host.get_option(c.host.host_ctx, decl.name, &value);
    if (s == LOOM_OK && value)
      text = value;
    else
      host_log(&c, LOOM_LOG_WARN, "host could not give option %s (%s); using the default %s", decl.name,
               loom_status_name(s), decl.default_value);
  }
  errno = 0;
  char *end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min_value)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s = \"%s\" is not an integer >= %lld", decl.name, text,
                static_cast<long long>(min_value));
  *out = v;
  return LOOM_OK;
}

// Whether this process sees a CUDA device. Asking for the count is the
// first CUDA call; it fails, with the reason worth showing, when the driver
// is missing or older than the runtime, or no device is visible.
loom_status find_devices(loom_collective_ctx &c) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    return fail(LOOM_ERR_UNAVAILABLE, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(rc));
  }
  if (count <= 0) return fail(LOOM_ERR_UNAVAILABLE, "no usable CUDA device: cudaGetDeviceCount: it found no device");
  c.device_count = count;
  int nccl = 0, runtime = 0, driver = 0;
  ncclGetVersion(&nccl);
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  host_log(&c, LOOM_LOG_DEBUG, "NCCL %d (built against %d), CUDA runtime %d, driver %d, %d device(s)", nccl,
           NCCL_VERSION_CODE, runtime, driver, count);
  return LOOM_OK;
}

loom_status init_impl(const loom_host_v1 *host, loom_collective_ctx **out) {
  if (!host || !out) return fail(LOOM_ERR_INVALID_ARGUMENT, "init: host and ctx must not be NULL");
  auto c = std::make_unique<loom_collective_ctx>();
  // Read only what the host filled in; missing job fields mean "unknown".
  std::memset(&c->host, 0, sizeof c->host);
  c->host.rank = c->host.world_size = c->host.local_rank = -1;
  std::memcpy(&c->host, host, std::min<size_t>(host->struct_size, sizeof c->host));
  c->host.struct_size = sizeof c->host;
  LOOM_NCCL_TRY(read_int_option(*c, kOptions[kOptTimeoutMs], 1, &c->default_timeout_ms));
  LOOM_NCCL_TRY(read_int_option(*c, kOptions[kOptWatchdogMs], 1, &c->watchdog_ms));
  LOOM_NCCL_TRY(find_devices(*c));
  *out = c.release();
  return LOOM_OK;
}

}  // namespace

void host_log(const loom_collective_ctx *ctx, loom_log_level level, const char *fmt, ...) {
  if (!ctx || !ctx->host.log) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  ctx->host.log(ctx->host.host_ctx, level, text);
}

loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept {
  if (ctx) *ctx = nullptr;
  const loom_status s = guarded([&]() -> loom_status { return init_impl(host, ctx); });
  if (s != LOOM_OK && why && why_len > 0) std::snprintf(why, why_len, "%s", last_error_text());
  return s;
}

void fini(loom_collective_ctx *ctx) noexcept {
  if (!ctx) return;
  if (int n = ctx->live_comms.load())
    host_log(ctx, LOOM_LOG_ERROR, "fini called with %d communicator(s) not destroyed; they are leaked", n);
  delete ctx;
}

const char *last_error(loom_collective_ctx *) noexcept { return last_error_text(); }

}  // namespace loom_nccl
