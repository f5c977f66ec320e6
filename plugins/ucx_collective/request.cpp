// SPDX-License-Identifier: Apache-2.0
// test / wait / request_free. UCX's shared-memory transports progress only
// when asked, so wait is a loop of progress passes (each under the instance
// mutex, released in between so comm_abort and other threads get in) with a
// spin-yield-sleep backoff, watching the deadline.
#include "request.h"

#include <mutex>

#include "backoff.h"
#include "comm.h"
#include "error.h"
#include "instance.h"
#include "op.h"

namespace loom_ucx {
namespace {

// One look at the request: a progress pass unless it has ended. *moved
// tells whether UCX reported any event.
bool poll(loom_request *r, bool *moved = nullptr) {
  if (!r->finished) {
    const bool events = progress_all(r->comm->ctx);
    if (moved) *moved = events;
  }
  if (!r->finished && r->comm->aborted.load(std::memory_order_acquire)) advance_op(r);
  return r->finished;
}

loom_status outcome(const loom_request *r) {
  return r->status == LOOM_OK ? LOOM_OK : fail(r->status, "%s", r->error.c_str());
}

}  // namespace

loom_status test(loom_request *request, int32_t *done) noexcept {
  if (done) *done = 0;
  return guarded([&]() -> loom_status {
    if (!request || !done) return fail(LOOM_ERR_INVALID_ARGUMENT, "test: request and done must not be NULL");
    std::lock_guard<std::mutex> lock(request->comm->ctx->mu);
    if (!poll(request)) return LOOM_OK;
    *done = 1;
    return outcome(request);
  });
}

loom_status wait(loom_request *request, int64_t timeout_ms) noexcept {
  return guarded([&]() -> loom_status {
    if (!request) return fail(LOOM_ERR_INVALID_ARGUMENT, "wait: request is NULL");
    loom_comm *comm = request->comm;
    loom_collective_ctx *ctx = comm->ctx;
    if (timeout_ms == LOOM_TIMEOUT_DEFAULT) timeout_ms = comm->timeout_ms;
    if (timeout_ms < 0)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "wait: timeout %lld ms is negative (LOOM_TIMEOUT_DEFAULT is -1)",
                  static_cast<long long>(timeout_ms));
    const auto deadline = deadline_after(timeout_ms);
    Backoff backoff(ctx->spin_us, ctx->yield_us);
    for (;;) {
      bool moved = false;
      {
        std::lock_guard<std::mutex> lock(ctx->mu);
        if (poll(request, &moved)) return outcome(request);
      }
      const auto now = Clock::now();
      if (moved) backoff.reset(now);
      if (now >= deadline)
        return fail(LOOM_ERR_TIMEOUT,
                    "%s on communicator \"%s\" did not finish within %lld ms; it is still pending (wait again or "
                    "abort the communicator)",
                    request->name, comm->name, static_cast<long long>(timeout_ms));
      backoff.pause(now);
    }
  });
}

void request_free(loom_request *request) noexcept {
  if (!request) return;
  guarded([&]() -> loom_status {
    loom_comm *comm = request->comm;
    std::lock_guard<std::mutex> lock(comm->ctx->mu);
    if (!request->finished) {
      if (!comm->aborted.load())
        host_log(comm->ctx, LOOM_LOG_ERROR,
                 "request_free: %s on \"%s\" is still pending and the communicator was not aborted; UCX may still "
                 "use its buffers until comm_destroy",
                 request->name, comm->name);
      unlink_op(request);
    }
    comm->live_requests.fetch_sub(1, std::memory_order_relaxed);
    if (has_pending(request)) {
      // UCX still holds some of its requests (an abort, a failure, a send
      // nobody matched): kept, with its buffers, until UCX lets go or the
      // communicator is destroyed.
      cancel_receives(request);
      comm->zombies.push_back(request);
    } else {
      delete request;
    }
    return LOOM_OK;
  });
}

}  // namespace loom_ucx
