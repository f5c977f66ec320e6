/* SPDX-License-Identifier: Apache-2.0 */
// A communicator: one non-blocking NCCL communicator on one device and
// stream, the operations posted on it, and its failure state. A watchdog
// thread per communicator (watchdog.cpp) looks at NCCL's asynchronous errors
// and at the posted operations' deadlines, and aborts the NCCL communicator
// when anything went wrong, so no waiter and no kernel waits forever.
//
// Locking: mu guards every NCCL call on `nccl` (NCCL calls on one
// communicator must not run concurrently) and every field below it. It is
// only ever held for non-blocking calls (NCCL's calls on a non-blocking
// communicator return ncclInProgress instead of waiting), never across
// ncclCommAbort, so comm_abort and test stay prompt.
#ifndef LOOM_NCCL_COMM_H
#define LOOM_NCCL_COMM_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/collective.h"
#include "loom/cxx/errors.hpp"

struct loom_comm {
  loom_collective_ctx *ctx = nullptr;
  loom::cxx::CommError error;  // comm_last_error: the last failed call's message
  int rank = 0, size = 0;
  int device = 0;          // CUDA ordinal; made current before every CUDA or NCCL call
  int64_t timeout_ms = 0;  // waits' default, and how long one posted operation may run
  int64_t watchdog_ms = 50;
  char name[64] = "";              // label for messages
  cudaStream_t stream = nullptr;   // where every operation is enqueued
  bool own_stream = false;         // created here (the host passed none), destroyed here
  bool pools = false;              // the device has stream-ordered allocation
  void *scratch = nullptr;         // the barrier's one element, device memory

  // Set once, when the communicator fails or is aborted: ABORTED,
  // PEER_FAILED, TIMEOUT, SYSTEM... Read without the lock by waiters.
  std::atomic<loom_status> failed{LOOM_OK};
  std::atomic<int64_t> live_requests{0};  // posted and not yet freed

  std::mutex mu;
  ncclComm_t nccl = nullptr;            // NULL once failed (handed to `doomed`) or destroyed
  ncclComm_t doomed = nullptr;          // failed, waiting for the watchdog's ncclCommAbort
  std::string failure;                  // why it failed
  std::vector<loom_request *> pending;  // posted with an event and not yet freed
  std::vector<cudaEvent_t> spare_events;
  bool unfinished_freed = false;  // a request was freed before it finished: destroy aborts
  bool stop = false;              // tells the watchdog to end
  std::condition_variable wake;   // wakes the watchdog (with mu)
  std::thread watchdog;
};

namespace loom_nccl {

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) noexcept;
loom_status comm_destroy(loom_comm *comm) noexcept;
loom_status comm_abort(loom_comm *comm) noexcept;

// Marks comm failed with status s (the first failure wins; later calls do
// nothing and return false): requests whose events have completed keep their
// success, the NCCL communicator is handed to the watchdog for
// ncclCommAbort, and every later post and every unfinished request fail.
// Call with comm->mu held.
bool mark_failed_locked(loom_comm *comm, loom_status s, const std::string &why);

// The status a post gets on a failed communicator: the failure's own, but
// ABORTED after a timeout (the communicator was aborted because of it).
loom_status post_status_after(loom_status failed);

}  // namespace loom_nccl

#endif  // LOOM_NCCL_COMM_H
