// SPDX-License-Identifier: Apache-2.0
// Posting's shared steps, and test / wait / request_free. Completion is the
// CUDA event recorded after the operation; failure is the communicator's
// (NCCL's asynchronous error, a deadline, or an abort), which the watchdog
// or whoever sees it first records with mark_failed_locked.
#include "request.h"

#include <algorithm>
#include <cstdio>

#include "device.h"
#include "instance.h"

namespace loom_nccl {
namespace {

// Records the outcome of a finished request. comm->mu held.
loom_status settle_request(loom_request *r, loom_status s, const std::string &error = std::string()) {
  r->done = true;
  r->status = s;
  r->error = error;
  return s;
}

// One non-blocking look at the request, comm->mu held; *done is set once it
// has an outcome.
loom_status poll_locked(loom_request *r, bool *done) {
  loom_comm *c = r->comm;
  *done = true;
  if (!r->done) {
    if (const loom_status f = c->failed.load(); f != LOOM_OK) {
      char text[160];
      std::snprintf(text, sizeof text, "%s on communicator \"%s\" did not finish: ", r->op, c->name);
      settle_request(r, f, text + c->failure);
    } else {
      const cudaError_t e = cudaEventQuery(r->event);
      if (e == cudaSuccess) {
        settle_request(r, LOOM_OK);
      } else if (e != cudaErrorNotReady) {
        fail_cuda(e, "cudaEventQuery");
        const std::string why = std::string(r->op) + ": " + last_error_text();
        mark_failed_locked(c, LOOM_ERR_SYSTEM, why);
        settle_request(r, LOOM_ERR_SYSTEM, why);
      } else {
        // Still running: has NCCL seen a failure (a peer gone, the network)?
        const ncclResult_t state = async_state(c->nccl);
        if (state == ncclSuccess || state == ncclInProgress) {
          *done = false;
          return LOOM_OK;
        }
        const std::string text =
            "NCCL reported " + nccl_error_text(state, c->nccl) + " while " + r->op + " was running";
        mark_failed_locked(c, async_status_of(state), text);
        settle_request(r, c->failed.load(), text);
      }
    }
  }
  if (r->status == LOOM_OK) return LOOM_OK;
  return fail(r->status, "%s", r->error.c_str());
}

}  // namespace

loom_status refuse_post_locked(loom_comm *c, const char *op) {
  return fail(post_status_after(c->failed.load()), "%s: communicator \"%s\" can no longer be used: %s", op, c->name,
              c->failure.empty() ? "it was aborted" : c->failure.c_str());
}

loom_status settle_locked(loom_comm *c, const char *what, std::unique_lock<std::mutex> &lock) {
  // NCCL enqueues in the background; the deadline bounds that, not the
  // operation, which the request's own deadline covers.
  const auto deadline = deadline_after(c->timeout_ms);
  Backoff backoff;
  for (;;) {
    if (c->failed.load() != LOOM_OK || !c->nccl) return refuse_post_locked(c, what);
    const ncclResult_t state = async_state(c->nccl);
    if (state == ncclSuccess) return LOOM_OK;
    if (state != ncclInProgress) {
      const loom_status s = fail(async_status_of(state), "%s on communicator \"%s\" failed: %s", what, c->name,
                                 nccl_error_text(state, c->nccl).c_str());
      mark_failed_locked(c, s, last_error_text());
      return s;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      const loom_status s =
          fail(LOOM_ERR_TIMEOUT, "%s on communicator \"%s\": NCCL did not take the operation within %lld ms", what,
               c->name, static_cast<long long>(c->timeout_ms));
      mark_failed_locked(c, s, last_error_text());
      return s;
    }
    lock.unlock();
    backoff.pause(now);
    lock.lock();
  }
}

loom_status take_event_locked(loom_comm *c, cudaEvent_t *event) {
  if (!c->spare_events.empty()) {
    *event = c->spare_events.back();
    c->spare_events.pop_back();
    return LOOM_OK;
  }
  // Timing off: the cheapest event to record and query.
  const cudaError_t e = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
  if (e != cudaSuccess) return fail_cuda(e, "cudaEventCreateWithFlags");
  return LOOM_OK;
}

loom_status post_done(loom_comm *c, const char *op, loom_request **out) {
  auto req = std::make_unique<loom_request>(c, op);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->failed.load() != LOOM_OK) return refuse_post_locked(c, op);
  }
  req->done = true;
  c->live_requests.fetch_add(1, std::memory_order_relaxed);
  *out = req.release();
  return LOOM_OK;
}

loom_status test(loom_request *request, int32_t *done) noexcept {
  if (done) *done = 0;
  return guarded([&]() -> loom_status {
    if (!request || !done) return fail(LOOM_ERR_INVALID_ARGUMENT, "test: request and done must not be NULL");
    LOOM_CXX_TRY(use_device(request->comm->device));
    std::lock_guard<std::mutex> lock(request->comm->mu);
    bool finished = false;
    const loom_status s = poll_locked(request, &finished);
    *done = finished ? 1 : 0;
    return s;
  });
}

loom_status wait(loom_request *request, int64_t timeout_ms) noexcept {
  return guarded([&]() -> loom_status {
    if (!request) return fail(LOOM_ERR_INVALID_ARGUMENT, "wait: request is NULL");
    loom_comm *c = request->comm;
    if (timeout_ms == LOOM_TIMEOUT_DEFAULT) timeout_ms = c->timeout_ms;
    if (timeout_ms < 0)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "wait: timeout %lld ms is negative (LOOM_TIMEOUT_DEFAULT is -1)",
                  static_cast<long long>(timeout_ms));
    LOOM_CXX_TRY(use_device(c->device));
    const auto deadline = deadline_after(timeout_ms);
    Backoff backoff;
    for (;;) {
      bool finished = false;
      loom_status s;
      {
        std::lock_guard<std::mutex> lock(c->mu);
        s = poll_locked(request, &finished);
      }
      if (finished) return s;
      const auto now = Clock::now();
      if (now >= deadline)
        return fail(LOOM_ERR_TIMEOUT,
                    "%s on communicator \"%s\" did not finish within %lld ms; it is still pending (wait again or "
                    "abort the communicator)",
                    request->op, c->name, static_cast<long long>(timeout_ms));
      backoff.pause(now);
    }
  });
}

void request_free(loom_request *request) noexcept {
  if (!request) return;
  guarded([&]() -> loom_status {
    loom_comm *c = request->comm;
    use_device(c->device);  // best effort: the request is freed regardless
    {
      std::lock_guard<std::mutex> lock(c->mu);
      auto it = std::find(c->pending.begin(), c->pending.end(), request);
      if (it != c->pending.end()) c->pending.erase(it);
      if (!request->done && request->event && cudaEventQuery(request->event) != cudaSuccess) {
        cudaGetLastError();
        if (c->failed.load() == LOOM_OK) {
          // The GPU may still read or write the caller's buffers; only an
          // abort at destroy can stop it.
          c->unfinished_freed = true;
          host_log(c->ctx, LOOM_LOG_ERROR,
                   "request_free: %s on \"%s\" is still running and the communicator was not aborted; the GPU may "
                   "still use its buffers until comm_destroy",
                   request->op, c->name);
        }
      }
      if (request->event) c->spare_events.push_back(request->event);
    }
    c->live_requests.fetch_sub(1, std::memory_order_relaxed);
    delete request;
    return LOOM_OK;
  });
}

}  // namespace loom_nccl
