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
#include "loom/cxx/options.hpp"
#include "options.h"

namespace loom_nccl {
namespace {

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
  c->host = loom::cxx::copy_host(*host);  // what the host filled in; the rest "unknown"
  const loom::cxx::Options options(c->host);
  LOOM_CXX_TRY(options.get_int(kOptions[kOptTimeoutMs], 1, &c->default_timeout_ms));
  LOOM_CXX_TRY(options.get_int(kOptions[kOptWatchdogMs], 1, &c->watchdog_ms));
  LOOM_CXX_TRY(find_devices(*c));
  *out = c.release();
  return LOOM_OK;
}

}  // namespace

loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept {
  return loom::cxx::guarded_init(ctx, why, why_len, [&] { return init_impl(host, ctx); });
}

void fini(loom_collective_ctx *ctx) noexcept {
  if (!ctx) return;
  if (int n = ctx->live_comms.load())
    host_log(ctx, LOOM_LOG_ERROR, "fini called with %d communicator(s) not destroyed; they are leaked", n);
  delete ctx;
}

const char *last_error(loom_collective_ctx *) noexcept { return last_error_text(); }

}  // namespace loom_nccl
