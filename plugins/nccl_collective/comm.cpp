// SPDX-License-Identifier: Apache-2.0
// comm_create / comm_destroy / comm_abort, and marking a communicator failed.
#include "comm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "bootstrap.h"
#include "device.h"
#include "error.h"
#include "instance.h"
#include "request.h"
#include "watchdog.h"

namespace loom_nccl {
namespace {

// How long comm_destroy lets ncclCommFinalize flush, and lets the stream
// drain after an abort, before it gives up waiting (it never blocks on peers).
constexpr int64_t kDestroyBoundMs = 10000;

// This rank's own set-up: device, stream, barrier scratch. Its outcome is
// shared with the other ranks before NCCL starts (bootstrap.h).
loom_status prepare_local(loom_comm *c, const loom_collective_ctx *ctx, void *stream) {
  if (c->device < 0 || c->device >= ctx->device_count)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create \"%s\": device_id %d is not a CUDA device here (have %d)",
                c->name, c->device, ctx->device_count);
  LOOM_CXX_TRY(use_device(c->device));
  if (stream) {
    c->stream = static_cast<cudaStream_t>(stream);
#if CUDART_VERSION >= 12080
    int stream_device = -1;
    if (cudaStreamGetDevice(c->stream, &stream_device) == cudaSuccess && stream_device != c->device)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create \"%s\": the stream belongs to device %d, not device_id %d",
                  c->name, stream_device, c->device);
    cudaGetLastError();
#endif
  } else {
    // Non-blocking: it must not synchronise with the legacy default stream,
    // on which the host may run unrelated work.
    const cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return fail_cuda(e, "cudaStreamCreateWithFlags");
    c->own_stream = true;
  }
  c->pools = has_memory_pools(c->device);
  LOOM_CXX_TRY(scratch_alloc(16, c->stream, c->pools, &c->scratch));
  const cudaError_t e = cudaMemsetAsync(c->scratch, 0, 16, c->stream);
  if (e != cudaSuccess) return fail_cuda(e, "cudaMemsetAsync");
  return LOOM_OK;
}

// Frees what prepare_local made (also after a partial set-up). After a
// failure the stream may still hold aborted work: scratch is then freed
// stream-ordered or leaked, never with a device-wide wait.
void release_local(loom_comm *c, bool idle) {
  scratch_free(c->scratch, c->stream, c->pools, idle);
  c->scratch = nullptr;
  for (cudaEvent_t e : c->spare_events) cudaEventDestroy(e);
  c->spare_events.clear();
  if (c->own_stream && c->stream) cudaStreamDestroy(c->stream);  // returns at once; freed once idle
  c->stream = nullptr;
  cudaGetLastError();
}

// Polls ncclCommGetAsyncError until NCCL's background work on comm ends:
// ncclSuccess, an error, or ncclInProgress still at the bound.
ncclResult_t poll_until(ncclComm_t comm, int64_t bound_ms) {
  const auto deadline = deadline_after(bound_ms);
  Backoff backoff;
  for (;;) {
    const ncclResult_t state = async_state(comm);
    if (state != ncclInProgress) return state;
    const auto now = Clock::now();
    if (now >= deadline) return ncclInProgress;
    backoff.pause(now);
  }
}

// After an abort, lets the stream run past the aborted kernels, so the
// caller's buffers are free when destroy returns (collective.h); bounded.
void drain_stream(loom_comm *c) {
  cudaEvent_t drained = nullptr;
  if (cudaEventCreateWithFlags(&drained, cudaEventDisableTiming) != cudaSuccess) return (void)cudaGetLastError();
  if (cudaEventRecord(drained, c->stream) == cudaSuccess) {
    const auto deadline = deadline_after(std::min(c->timeout_ms, kDestroyBoundMs));
    Backoff backoff;
    while (cudaEventQuery(drained) == cudaErrorNotReady && Clock::now() < deadline) backoff.pause(Clock::now());
    if (cudaEventQuery(drained) == cudaErrorNotReady)
      host_log(c->ctx, LOOM_LOG_WARN, "communicator \"%s\": its stream still runs work after the abort", c->name);
  }
  cudaEventDestroy(drained);
  cudaGetLastError();
}

loom_status create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **out) {
  if (!ctx || !config || !out)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create: ctx, config and comm must not be NULL");
  loom_comm_config_v1 cfg;
  std::memset(&cfg, 0, sizeof cfg);
  std::memcpy(&cfg, config, std::min<size_t>(config->struct_size, sizeof cfg));
  if (config->struct_size < offsetof(loom_comm_config_v1, timeout_ms) + sizeof cfg.timeout_ms)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create: config struct_size %u is too small", config->struct_size);
  const char *label = cfg.name && cfg.name[0] ? cfg.name : "nccl";
  if (cfg.device_type != LOOM_DEVICE_CUDA)
    return fail(LOOM_ERR_UNSUPPORTED,
                "comm_create \"%s\": the nccl plugin takes CUDA device memory only (device_type %d; "
                "LOOM_DEVICE_CUDA is %d); use a host-memory collective such as mpi or ucx for host buffers",
                label, cfg.device_type, LOOM_DEVICE_CUDA);
  if (!cfg.oob || !cfg.oob->allgather)
    return fail(LOOM_ERR_INVALID_ARGUMENT,
                "comm_create \"%s\": the nccl plugin needs the out-of-band exchange (config->oob) to share "
                "NCCL's unique id",
                label);
  if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create \"%s\": rank %d is not in [0, %d)", label, cfg.rank, cfg.size);

  auto comm = std::make_unique<loom_comm>();
  comm->ctx = ctx;
  comm->rank = cfg.rank;
  comm->size = cfg.size;
  comm->device = cfg.device_id;  // 0 when the host's struct predates it
  comm->timeout_ms = cfg.timeout_ms > 0 ? cfg.timeout_ms : ctx->default_timeout_ms;
  comm->watchdog_ms = ctx->watchdog_ms;
  std::snprintf(comm->name, sizeof comm->name, "%s", label);
  const auto deadline = deadline_after(comm->timeout_ms);

  const loom_status local = prepare_local(comm.get(), ctx, cfg.stream);
  ncclUniqueId id;
  loom_status s = exchange_unique_id(*cfg.oob, comm->rank, comm->size, local, deadline, comm->name, &id);
  if (s == LOOM_OK) s = init_nccl(id, comm->rank, comm->size, deadline, comm->timeout_ms, comm->name, &comm->nccl);
  if (s == LOOM_OK) s = start_watchdog(comm.get());
  if (s != LOOM_OK) {
    const std::string why = last_error_text();
    if (comm->nccl) ncclCommAbort(comm->nccl);
    release_local(comm.get(), /*idle=*/comm->nccl == nullptr);
    return fail(s, "%s", why.c_str());
  }
  ctx->live_comms.fetch_add(1);
  host_log(ctx, LOOM_LOG_DEBUG, "communicator \"%s\": rank %d of %d on CUDA device %d, %s stream, timeout %lld ms",
           comm->name, comm->rank, comm->size, comm->device, comm->own_stream ? "its own" : "the host's",
           static_cast<long long>(comm->timeout_ms));
  *out = comm.release();
  return LOOM_OK;
}

loom_status destroy(loom_comm *c) {
  if (!c) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_destroy: comm is NULL");
  if (int64_t n = c->live_requests.load())
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_destroy \"%s\": %lld request(s) not freed yet", c->name,
                static_cast<long long>(n));
  use_device(c->device);  // best effort: destroy goes on regardless
  stop_watchdog(c);
  abort_doomed(c);  // failed after the watchdog's last look
  loom_status s = LOOM_OK;
  bool aborted = c->failed.load() != LOOM_OK;
  ncclComm_t nccl;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    nccl = c->nccl;
    c->nccl = nullptr;
  }
  if (nccl && c->unfinished_freed) {
    ncclCommAbort(nccl);  // something may still run: do not wait for it
    aborted = true;
  } else if (nccl) {
    // Finalize flushes NCCL's own work; bounded, since a peer gone quiet
    // could keep it in progress. Then destroy only frees local resources.
    ncclResult_t rc = ncclCommFinalize(nccl);
    if (rc == ncclSuccess || rc == ncclInProgress) rc = poll_until(nccl, std::min(c->timeout_ms, kDestroyBoundMs));
    if (rc == ncclSuccess) {
      rc = ncclCommDestroy(nccl);
      if (rc != ncclSuccess && rc != ncclInProgress) s = fail_nccl(rc, "ncclCommDestroy", nullptr);
    } else {
      host_log(c->ctx, LOOM_LOG_WARN, "communicator \"%s\": ncclCommFinalize %s; aborting it instead", c->name,
               rc == ncclInProgress ? "did not finish in time" : ncclGetErrorString(rc));
      ncclCommAbort(nccl);
      aborted = true;
    }
  }
  if (aborted) drain_stream(c);
  release_local(c, /*idle=*/!aborted);
  c->ctx->live_comms.fetch_sub(1);
  delete c;
  return s;
}

}  // namespace

bool mark_failed_locked(loom_comm *c, loom_status s, const std::string &why) {
  if (c->failed.load() != LOOM_OK) return false;
  // Operations the GPU finished before the failure keep their success.
  for (loom_request *r : c->pending) {
    if (r->done) continue;
    const cudaError_t e = cudaEventQuery(r->event);
    if (e == cudaSuccess) {
      r->done = true;
      r->status = LOOM_OK;
    } else if (e != cudaErrorNotReady) {
      cudaGetLastError();
    }
  }
  c->failure = why;
  c->failed.store(s);
  c->doomed = c->nccl;
  c->nccl = nullptr;
  c->wake.notify_all();
  return true;
}

loom_status post_status_after(loom_status failed) {
  return failed == LOOM_ERR_TIMEOUT || failed == LOOM_OK ? LOOM_ERR_ABORTED : failed;
}

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) noexcept {
  if (comm) *comm = nullptr;
  return guarded([&]() -> loom_status { return create(ctx, config, comm); });
}

loom_status comm_destroy(loom_comm *comm) noexcept {
  return guarded([&]() -> loom_status { return destroy(comm); });
}

loom_status comm_abort(loom_comm *comm) noexcept {
  return guarded([&]() -> loom_status {
    if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_abort: comm is NULL");
    use_device(comm->device);  // for the event queries below; any thread may call
    // Marking is quick and wakes every waiter's next poll; the watchdog runs
    // the (slower) ncclCommAbort.
    std::lock_guard<std::mutex> lock(comm->mu);
    mark_failed_locked(comm, LOOM_ERR_ABORTED, "comm_abort was called");
    return LOOM_OK;
  });
}

}  // namespace loom_nccl
