/* SPDX-License-Identifier: Apache-2.0 */
// A plugin instance (loom_collective_ctx): one UCP context, the UCP worker
// its communicators share, and the progress engine that drives every posted
// operation.
//
// Why one worker for all communicators: a worker holds transport resources
// (shared-memory FIFOs, sockets, about 8 descriptors and 4 MiB here) and
// takes about 9 ms to create and destroy, so a worker per communicator would
// make swarm rounds and thousands of short-lived groups expensive and bound
// by descriptors. Communicators are kept apart by the id in every tag
// (wire.h) and by their own endpoints, so a dead peer fails only the
// communicators it belongs to.
//
// Except after a failure: once a communicator on a worker has failed or been
// aborted, new communicators get a fresh worker, and the old one goes when
// its last communicator does. Rendezvous transfers cut short by the failure
// (one side cancelled, the other still answering) can otherwise confuse UCX
// 1.13 about which request a late protocol message belongs to, since it
// reuses request and endpoint ids; the kill tests hung now and then on the
// survivors' new communicator until they got fresh workers.
//
// Thread safety: all UCX calls and all communicator and operation state are
// guarded by `mu` (workers run in UCS_THREAD_MODE_SERIALIZED). Only
// comm_abort and the atomics it sets are touched without it.
#ifndef LOOM_UCX_INSTANCE_H
#define LOOM_UCX_INSTANCE_H

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cma.h"
#include "loom/collective.h"
#include "loom/cxx/errors.hpp"

namespace loom_ucx {

struct Tuning {
  int64_t ring_threshold = 0;           // allreduce: ring at or above, recursive doubling below
  int64_t tree_pipeline_threshold = 0;  // broadcast/reduce/alltoall: in place and chunked at or above
  int64_t chunk_bytes = 0;
  int64_t pipeline_depth = 0;
  int64_t cma_threshold = 0;            // -1: never by cross-memory attach
  bool cma_whole_blocks = true;         // ring_pipeline.cpp: whole blocks between ranks of one host
  bool cma_only_oversubscribed = true;  // comm.cpp: cross-memory attach only with more ranks than CPUs
};

// An endpoint being closed in the background, and the error-callback
// argument that must outlive it.
struct Closing {
  void *request;  // NULL once UCX finished
  struct PeerSlot *slot;
};

struct Worker {
  ucp_worker_h handle = nullptr;
  std::vector<uint8_t> address;  // sent in every out-of-band exchange
  int comms = 0;                 // communicators on it, live or being created
  bool tainted = false;          // one failed or was aborted: no new ones here
  std::vector<Closing> closing;  // endpoints closing in the background
};

}  // namespace loom_ucx

struct loom_collective_ctx {
  loom_host_v1 host;  // a copy; fields beyond the host's struct_size stay zero / -1
  int64_t default_timeout_ms = 0;
  int64_t spin_us = 0;
  int64_t yield_us = 0;
  loom_ucx::Tuning tuning;
  loom_ucx::CmaIdentity cma{};  // told to every member in comm_create
  int64_t process_check_ms = 0;  // how often members' processes on this host are read (keepalive_ms)
  std::chrono::steady_clock::time_point next_process_check{};  // under mu

  ucp_context_h context = nullptr;

  std::mutex mu;
  // The last one takes new communicators unless tainted.
  std::vector<std::unique_ptr<loom_ucx::Worker>> workers;
  std::vector<loom_comm *> comms;  // live communicators
  loom_request *active = nullptr;  // unfinished operations (intrusive list)
  uint16_t next_comm_id = 1;
  std::atomic<int> live_comms{0};
};

namespace loom_ucx {

// Formats one message into the host's log (dropped if the host gave no log).
using loom::cxx::host_log;

// The worker a new communicator goes on (a fresh one if the current one is
// tainted), counted as used; NULL with the reason recorded on failure.
// Mutex held.
Worker *acquire_worker(loom_collective_ctx *ctx);
// Gives a communicator's use of w back; a tainted worker nobody uses is
// destroyed. Mutex held.
void release_worker(loom_collective_ctx *ctx, Worker *w);

// One pass of the progress engine: progresses the worker, then every
// communicator's control traffic and every unfinished operation of the
// instance (so a wait on one operation never starves another that a peer
// needs first), on every worker. Returns whether UCX reported any event.
// Call with ctx->mu held.
bool progress_all(loom_collective_ctx *ctx);

// The vtable's init, fini and last_error.
loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept;
void fini(loom_collective_ctx *ctx) noexcept;
const char *last_error(loom_collective_ctx *ctx) noexcept;

}  // namespace loom_ucx

#endif  // LOOM_UCX_INSTANCE_H
