/* SPDX-License-Identifier: Apache-2.0 */
// A posted operation: the MPI request, the work left for after completion
// (AVG division, moving an in-place reduce_scatter result), and its outcome.
#ifndef LOOM_MPI_REQUEST_H
#define LOOM_MPI_REQUEST_H

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm.h"
#include "error.h"
#include "instance.h"

namespace loom_mpi {

// What happens when a request ends: the work after MPI reports completion
// (in field order), and how an unfinished request may be let go.
struct Finish {
  // send/recv may be released unfinished with MPI_Request_free (a recv is
  // cancelled first); collectives may not.
  enum Kind { kCollective, kSend, kRecv } kind = kCollective;
  // In-place reduce_scatter: MPI leaves the result at the start of the
  // buffer, NCCL's rule wants it at send + rank * recvcount.
  const void *move_from = nullptr;
  void *move_to = nullptr;
  size_t move_bytes = 0;
  // AVG: MPI summed, divide by the communicator size.
  void *avg_buf = nullptr;
  uint64_t avg_count = 0;
  loom_dtype dtype = 0;
  // allreduce_scaled: MPI summed into avg_buf, multiply by scale instead.
  bool scaled = false;
  double scale = 1.0;
  // recv: check that the message had the expected length.
  bool check_recv = false;
  int recv_count = 0;
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;
};

}  // namespace loom_mpi

struct loom_request {
  loom_request(loom_comm *c, const char *op_name, const loom_mpi::Finish &f) : comm(c), op(op_name), finish(f) {}
  loom_comm *comm;
  const char *op;  // "allreduce", for messages
  loom_mpi::Finish finish;
  MPI_Request mpi = MPI_REQUEST_NULL;
  bool finished = false;  // MPI completed it (successfully or not)
  loom_status status = LOOM_OK;
  std::string error;  // the message when status != LOOM_OK
};

namespace loom_mpi {

// A request for a new post: the communicator's spare one when it has it.
inline std::unique_ptr<loom_request> new_request(loom_comm *comm, const char *op, const Finish &finish) {
  if (loom_request *reused = comm->spare) {
    comm->spare = nullptr;
    *reused = loom_request(comm, op, finish);
    return std::unique_ptr<loom_request>(reused);
  }
  return std::make_unique<loom_request>(comm, op, finish);
}

// Records the outcome of a request whose MPI call has already completed (the
// blocking option): the AVG division and in-place moves run here.
void finish_now(loom_request *request);

// The work after MPI reports an operation complete (see Finish); st is its
// MPI status (read only for a recv). Returns the operation's final status.
loom_status after_mpi(const loom_comm *comm, const Finish &finish, const MPI_Status &st);

// Waits for an operation posted for a caller that passed request == NULL
// (LOOM_CAP_INLINE_COMPLETION), at most the communicator's timeout. request
// lives on the caller's stack. On TIMEOUT the operation can never be waited
// on again, so it is let go as request_free would after an abort and the
// communicator is aborted; on ABORTED it is let go the same way.
loom_status wait_inline(loom_request *request);

// Completes an inline (request == NULL) operation: posts it with
// start(MPI_Request *) into a request on this stack frame, then waits.
template <class Start>
loom_status run_inline(loom_comm *comm, const char *op, const char *mpi_name, const Finish &finish, Start &&start) {
  loom_request req(comm, op, finish);  // on the stack: nothing to allocate or free
  {
    MpiCallLock lock;
    const int rc = start(&req.mpi);
    if (rc != MPI_SUCCESS) return fail_mpi(rc, mpi_name);
  }
  return wait_inline(&req);
}

// Allocates a request, posts it with start(MPI_Request *) under the MPI lock
// and hands it out in *out; mpi_name names the MPI call in errors. With the
// blocking option, run_now() (MPI's blocking call) runs instead and the
// request holds MPI_REQUEST_NULL, which MPI_Test reports as finished at once.
// out == NULL completes the operation before returning: with the blocking
// option by run_now() alone (no request object at all: the small-message
// fast path), otherwise by run_inline.
// Every post asks this after its argument checks: ABORTED comes after
// INVALID_ARGUMENT (collective.h).
inline loom_status refuse_if_aborted(const loom_comm *comm, const char *op) {
  if (comm->aborted.load(std::memory_order_acquire))
    return fail(LOOM_ERR_ABORTED, "%s: communicator \"%s\" was aborted", op, comm->name);
  return LOOM_OK;
}

template <class Start, class RunNow>
loom_status post(loom_comm *comm, const char *op, const char *mpi_name, const Finish &finish, loom_request **out,
                 Start &&start, RunNow &&run_now) {
  LOOM_CXX_TRY(refuse_if_aborted(comm, op));
  if (!out) {
    if (!comm->blocking) return run_inline(comm, op, mpi_name, finish, start);
    {
      MpiCallLock lock;
      const int rc = run_now();
      if (rc != MPI_SUCCESS) return fail_mpi(rc, mpi_name);
    }
    const bool more = finish.avg_buf || finish.move_bytes;  // collectives never check a recv
    return more ? after_mpi(comm, finish, MPI_Status{}) : LOOM_OK;
  }
  auto req = new_request(comm, op, finish);
  {
    MpiCallLock lock;
    int rc = comm->blocking ? run_now() : start(&req->mpi);
    if (rc != MPI_SUCCESS) return fail_mpi(rc, mpi_name);
  }
  // Finished already: settle it now, so test and wait need not touch MPI.
  if (comm->blocking) finish_now(req.get());
  comm->live_requests.fetch_add(1, std::memory_order_relaxed);
  *out = req.release();
  return LOOM_OK;
}

// Point to point has no blocking form here: a blocking send could deadlock
// against the peer's order of posts, and MPI_Send could not time out. Inline
// (out == NULL), it is posted and waited on like any inline operation.
template <class Start>
loom_status post(loom_comm *comm, const char *op, const char *mpi_name, const Finish &finish, loom_request **out,
                 Start &&start) {
  LOOM_CXX_TRY(refuse_if_aborted(comm, op));
  if (!out) return run_inline(comm, op, mpi_name, finish, start);
  auto req = new_request(comm, op, finish);
  {
    MpiCallLock lock;
    int rc = start(&req->mpi);
    if (rc != MPI_SUCCESS) return fail_mpi(rc, mpi_name);
  }
  comm->live_requests.fetch_add(1, std::memory_order_relaxed);
  *out = req.release();
  return LOOM_OK;
}

loom_status test(loom_request *request, int32_t *done) noexcept;
loom_status wait(loom_request *request, int64_t timeout_ms) noexcept;
void request_free(loom_request *request) noexcept;

}  // namespace loom_mpi

#endif  // LOOM_MPI_REQUEST_H
