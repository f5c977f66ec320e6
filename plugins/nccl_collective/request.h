/* SPDX-License-Identifier: Apache-2.0 */
// A posted operation: the CUDA event recorded after it on the stream, its
// deadline, and its outcome; posting (enqueue, settle ncclInProgress, record
// the event) and test / wait / request_free.
#ifndef LOOM_NCCL_REQUEST_H
#define LOOM_NCCL_REQUEST_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <string>

#include "backoff.h"
#include "comm.h"
#include "error.h"

struct loom_request {
  loom_request(loom_comm *c, const char *op_name) : comm(c), op(op_name) {}
  loom_comm *comm;
  const char *op;                  // "allreduce", for messages
  cudaEvent_t event = nullptr;     // NULL: finished when posted (count 0)
  loom_nccl::Clock::time_point deadline;  // the watchdog aborts the communicator after it
  bool done = false;               // finished (successfully or not); guarded by comm->mu
  loom_status status = LOOM_OK;
  std::string error;               // the message when status != LOOM_OK
};

namespace loom_nccl {

// Fails a post on a communicator that has failed, naming op and the failure.
// Call with comm->mu held.
loom_status refuse_post_locked(loom_comm *comm, const char *op);

// Waits, after an NCCL call on comm returned ncclInProgress, until NCCL has
// finished it in the background (LOOM_OK), the communicator fails, or the
// communicator's timeout passes (which fails it). lock holds comm->mu on
// entry and on return; it is released between polls.
loom_status settle_locked(loom_comm *comm, const char *what, std::unique_lock<std::mutex> &lock);

// The event the next post records (a spare one or a new one). comm->mu held.
loom_status take_event_locked(loom_comm *comm, cudaEvent_t *event);

// Hands out a request that has finished already (count 0: nothing to move).
loom_status post_done(loom_comm *comm, const char *op, loom_request **out);

// Posts one operation: under comm->mu, enqueue(ncclComm_t) makes the NCCL
// call(s) and returns NCCL's result, named nccl_call in messages; once NCCL
// has the work (ncclInProgress settled), the event is recorded on the
// stream and the request handed out in *out. cleanup(alive) runs exactly
// once, under the lock, after the enqueue: alive is false when the
// communicator failed while NCCL might still be enqueuing, so memory the
// operation reads must then be left alone (leaked).
template <class Enqueue, class Cleanup>
loom_status post(loom_comm *comm, const char *op, const char *nccl_call, loom_request **out, Enqueue &&enqueue,
                 Cleanup &&cleanup) {
  auto req = std::make_unique<loom_request>(comm, op);
  std::unique_lock<std::mutex> lock(comm->mu);
  if (comm->failed.load() != LOOM_OK || !comm->nccl) {
    cleanup(true);  // nothing was enqueued
    return refuse_post_locked(comm, op);
  }
  loom_status s = take_event_locked(comm, &req->event);
  if (s != LOOM_OK) {
    cleanup(true);
    return s;
  }
  const ncclResult_t rc = enqueue(comm->nccl);
  if (rc == ncclInProgress) s = settle_locked(comm, nccl_call, lock);
  else if (rc != ncclSuccess) s = fail_nccl(rc, nccl_call, comm->nccl);
  cleanup(s == LOOM_OK || rc != ncclInProgress);
  if (s == LOOM_OK) {
    const cudaError_t e = cudaEventRecord(req->event, comm->stream);
    if (e != cudaSuccess) {
      // The operation is queued but cannot be watched: stop the communicator.
      s = fail_cuda(e, "cudaEventRecord after the operation");
      mark_failed_locked(comm, LOOM_ERR_SYSTEM, std::string(op) + ": " + last_error_text());
    }
  }
  if (s != LOOM_OK) {
    comm->spare_events.push_back(req->event);
    return s;
  }
  req->deadline = deadline_after(comm->timeout_ms);
  comm->pending.push_back(req.get());
  comm->live_requests.fetch_add(1, std::memory_order_relaxed);
  *out = req.release();
  return LOOM_OK;
}

loom_status test(loom_request *request, int32_t *done) noexcept;
loom_status wait(loom_request *request, int64_t timeout_ms) noexcept;
void request_free(loom_request *request) noexcept;

}  // namespace loom_nccl

#endif  // LOOM_NCCL_REQUEST_H
