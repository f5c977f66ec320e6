// SPDX-License-Identifier: Apache-2.0
// The watchdog loop.
#include "watchdog.h"

#include <chrono>
#include <cstdio>
#include <system_error>

#include "comm.h"
#include "device.h"
#include "instance.h"
#include "request.h"

namespace loom_nccl {
namespace {

// NCCL's asynchronous error, if any. comm->mu held, comm->nccl set.
bool check_async_error(loom_comm *c) {
  const ncclResult_t state = async_state(c->nccl);
  if (state == ncclSuccess || state == ncclInProgress) return false;
  mark_failed_locked(c, async_status_of(state),
                     "NCCL reported " + nccl_error_text(state, c->nccl) + " (a peer died or the network failed?)");
  return true;
}

// Settles finished operations and fails the communicator when one ran past
// its deadline. comm->mu held.
void check_deadlines(loom_comm *c) {
  const auto now = Clock::now();
  for (loom_request *r : c->pending) {
    if (r->done) continue;
    const cudaError_t e = cudaEventQuery(r->event);
    if (e == cudaSuccess) {
      r->done = true;
      r->status = LOOM_OK;
      continue;
    }
    if (e != cudaErrorNotReady) cudaGetLastError();  // test() reports it to the caller
    if (now < r->deadline) continue;
    char why[384];
    std::snprintf(why, sizeof why,
                  "%s ran past the communicator's timeout of %lld ms, so the communicator was aborted (a peer is "
                  "stalled, gone, or posted different operations)",
                  r->op, static_cast<long long>(c->timeout_ms));
    mark_failed_locked(c, LOOM_ERR_TIMEOUT, why);
    return;
  }
}

void run(loom_comm *c) {
  // CUDA's current device is per thread: this one makes the comm's current
  // once, for its event queries and NCCL calls.
  const bool device_ok = use_device(c->device) == LOOM_OK;
  std::unique_lock<std::mutex> lock(c->mu);
  while (!c->stop) {
    c->wake.wait_for(lock, std::chrono::milliseconds(c->watchdog_ms),
                     [c] { return c->stop || c->doomed != nullptr; });
    if (c->doomed) {
      lock.unlock();
      abort_doomed(c);
      lock.lock();
      continue;
    }
    if (c->stop || !c->nccl || !device_ok) continue;
    if (!check_async_error(c)) check_deadlines(c);
  }
}

}  // namespace

void abort_doomed(loom_comm *c) {
  ncclComm_t doomed;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    doomed = c->doomed;
    c->doomed = nullptr;
    why = c->failure;
  }
  if (!doomed) return;
  // Local: it stops this rank's kernels and proxy threads without waiting
  // for any peer. Kept outside the lock so that waiters see the failure now.
  const ncclResult_t rc = ncclCommAbort(doomed);
  host_log(c->ctx, LOOM_LOG_WARN, "communicator \"%s\" aborted (%s)%s%s", c->name, why.c_str(),
           rc == ncclSuccess ? "" : "; ncclCommAbort: ", rc == ncclSuccess ? "" : ncclGetErrorString(rc));
}

loom_status start_watchdog(loom_comm *c) {
  try {
    c->watchdog = std::thread(run, c);
  } catch (const std::system_error &e) {
    return fail(LOOM_ERR_SYSTEM, "comm_create \"%s\": cannot start the watchdog thread: %s", c->name, e.what());
  }
  return LOOM_OK;
}

void stop_watchdog(loom_comm *c) {
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->stop = true;
  }
  c->wake.notify_all();
  if (c->watchdog.joinable()) c->watchdog.join();
}

}  // namespace loom_nccl
