// SPDX-License-Identifier: Apache-2.0
// test / wait / request_free. MPI progresses only inside MPI calls, so wait
// is a loop of MPI_Test that also watches the abort flag and the deadline.
#include "request.h"

#include <cstdio>
#include <cstring>

#include "../common/average.h"
#include "backoff.h"
#include "comm.h"
#include "reduce_ops.h"

namespace loom_mpi {
namespace {

// Records the final status of a request whose MPI part is over.
loom_status settle(loom_request *r, loom_status s) {
  r->finished = true;
  r->status = s;
  if (s != LOOM_OK) r->error = last_error_text();
  return s;
}

}  // namespace

loom_status after_mpi(const loom_comm *comm, const Finish &f, const MPI_Status &st) {
  if (f.check_recv) {
    int got = 0;
    {
      MpiCallLock lock;
      MPI_Get_count(&st, f.recv_type, &got);
    }
    if (got != f.recv_count)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "recv expected %d elements from rank %d but the message had %d",
                  f.recv_count, st.MPI_SOURCE, got);
  }
  if (f.move_bytes) std::memmove(f.move_to, f.move_from, f.move_bytes);
  if (f.avg_buf && f.scaled) loom_plugin_common::scale_in_place(f.avg_buf, f.avg_count, f.dtype, f.scale);
  else if (f.avg_buf) divide_in_place(f.avg_buf, f.avg_count, f.dtype, comm->size);
  return LOOM_OK;
}

namespace {

// One non-blocking look at the request; *done is set once it has an outcome.
loom_status poll(loom_request *r, bool *done) {
  *done = true;
  if (r->finished) return r->status == LOOM_OK ? LOOM_OK : fail(r->status, "%s", r->error.c_str());
  if (r->comm->aborted.load(std::memory_order_acquire))
    return fail(LOOM_ERR_ABORTED, "%s on communicator \"%s\": the communicator was aborted", r->op, r->comm->name);
  int flag = 0;
  MPI_Status st;
  loom_status err = LOOM_OK;
  {
    MpiCallLock lock;
    const int rc = MPI_Test(&r->mpi, &flag, &st);
    if (rc != MPI_SUCCESS) {
      char what[64];
      std::snprintf(what, sizeof what, "MPI_Test on %s", r->op);
      err = fail_mpi(rc, what);
      r->mpi = MPI_REQUEST_NULL;  // an erroneous request is over either way
    }
  }
  if (err != LOOM_OK) return settle(r, err);
  if (!flag) {
    *done = false;
    return LOOM_OK;
  }
  return settle(r, after_mpi(r->comm, r->finish, st));
}

// Lets go of a request MPI has not finished, without blocking (request_free
// after an abort). Point-to-point requests are released the way MPI allows:
// a recv is cancelled, so a late message cannot land in a buffer the caller
// has freed, then MPI_Request_free lets MPI finish any send on its own. MPI
// forbids both calls on non-blocking collectives (MPI-3.1 section 5.12) and
// has no way to stop one, so a pending collective is abandoned: its request,
// the communicator and the half types it may still use are leaked (bounded:
// one per aborted operation), rather than freed under MPI's feet.
void release_unfinished(loom_request *r) {
  MpiCallLock lock;
  int flag = 0;
  if (MPI_Test(&r->mpi, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) return;  // over after all
  if (r->finish.kind == Finish::kCollective) {
    r->comm->abandoned.store(true);
    g_leaked_requests.fetch_add(1);
    return;
  }
  if (r->finish.kind == Finish::kRecv) MPI_Cancel(&r->mpi);
  MPI_Request_free(&r->mpi);
}

// Polls until the request has an outcome or timeout_ms passes (TIMEOUT, the
// request still pending).
loom_status wait_for(loom_request *request, int64_t timeout_ms) {
  bool done = false;
  loom_status s = poll(request, &done);  // before reading the clock: the common case is already done
  if (done) return s;
  const auto deadline = deadline_after(timeout_ms);
  const Backoff backoff(request->comm->ctx->spin_us);
  for (;;) {
    s = poll(request, &done);
    if (done) return s;
    const auto now = Clock::now();
    if (now >= deadline)
      return fail(LOOM_ERR_TIMEOUT,
                  "%s on communicator \"%s\" did not finish within %lld ms; it is still "
                  "pending (wait again or abort the communicator)",
                  request->op, request->comm->name, static_cast<long long>(timeout_ms));
    backoff.pause(now);
  }
}

}  // namespace

void finish_now(loom_request *request) { settle(request, after_mpi(request->comm, request->finish, MPI_Status{})); }

loom_status wait_inline(loom_request *request) {
  loom_comm *comm = request->comm;
  const loom_status s = wait_for(request, comm->timeout_ms);
  if (request->finished || request->mpi == MPI_REQUEST_NULL) return s;
  if (s == LOOM_ERR_TIMEOUT) {
    // The caller holds no request to wait on again, and the peers would match
    // their next operation against this pending one: the communicator is done.
    comm_abort(comm);
    fail(LOOM_ERR_TIMEOUT,
         "%s on communicator \"%s\" did not finish within %lld ms; it was completing inline (no request to "
         "wait on again), so the communicator was aborted",
         request->op, comm->name, static_cast<long long>(comm->timeout_ms));
  }
  release_unfinished(request);
  return s;
}

loom_status test(loom_request *request, int32_t *done) noexcept {
  if (done) *done = 0;
  return guarded([&]() -> loom_status {
    if (!request || !done) return fail(LOOM_ERR_INVALID_ARGUMENT, "test: request and done must not be NULL");
    bool finished = false;
    loom_status s = poll(request, &finished);
    *done = finished ? 1 : 0;
    return s;
  });
}

loom_status wait(loom_request *request, int64_t timeout_ms) noexcept {
  return guarded([&]() -> loom_status {
    if (!request) return fail(LOOM_ERR_INVALID_ARGUMENT, "wait: request is NULL");
    if (timeout_ms == LOOM_TIMEOUT_DEFAULT) timeout_ms = request->comm->timeout_ms;
    if (timeout_ms < 0)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "wait: timeout %lld ms is negative (LOOM_TIMEOUT_DEFAULT is -1)",
                  static_cast<long long>(timeout_ms));
    return wait_for(request, timeout_ms);
  });
}

void request_free(loom_request *request) noexcept {
  if (!request) return;
  guarded([&]() -> loom_status {
    loom_comm *comm = request->comm;
    if (!request->finished && request->mpi != MPI_REQUEST_NULL) {
      if (!comm->aborted.load())
        host_log(comm->ctx, LOOM_LOG_ERROR,
                 "request_free: %s on \"%s\" is still pending and the communicator was "
                 "not aborted; MPI may still use its buffers",
                 request->op, comm->name);
      release_unfinished(request);
    }
    comm->live_requests.fetch_sub(1, std::memory_order_relaxed);
    if (request->finished && comm->spare == nullptr && !comm->aborted.load(std::memory_order_relaxed)) {
      comm->spare = request;  // reused by the next post
    } else {
      delete request;
    }
    return LOOM_OK;
  });
}

}  // namespace loom_mpi
