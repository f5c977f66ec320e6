/* SPDX-License-Identifier: Apache-2.0 */
// A communicator: endpoints to every member on the instance's shared worker,
// the ids the members chose for it, its control channel, and its state
// (failed, aborted). Everything but `aborted` and `live_requests` is guarded
// by the instance's mutex.
#ifndef LOOM_UCX_COMM_H
#define LOOM_UCX_COMM_H

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "loom/collective.h"
#include "liveness.h"
#include "loom/cxx/errors.hpp"
#include "wire.h"
#include "xfer.h"

namespace loom_ucx {

struct Worker;

// The error callback's argument for one endpoint. It outlives the endpoint's
// close, and `comm` is cleared when the communicator goes away, so a late
// callback finds nothing to touch.
struct PeerSlot {
  loom_comm *comm;
  int32_t rank;
};

struct Peer {
  ucp_ep_h ep = nullptr;
  PeerSlot *slot = nullptr;
  uint16_t comm_id = 0;    // the id this peer chose: goes into every tag sent to it
  uint32_t send_seq = 0;   // point to point, to this peer
  uint32_t recv_seq = 0;   // point to point, from this peer
  bool failed = false;     // its endpoint reported an error
  int32_t cma_pid = 0;     // large messages go by cross-memory attach to / from this process (cma.h)
  ProcessWatch process;    // its process, when on this host (liveness.h)
  int exited_looks = 0;    // consecutive looks that found that process exited
};

// A control message being sent; the deque keeps its buffer in place.
struct ControlSend {
  Xfer xfer;
  ControlMessage msg;
};

// Reusable memory for pipelined algorithms. An operation holds a reference
// while UCX may write into it, so a buffer still referenced by an abandoned
// operation is never handed to a new one.
using Scratch = std::shared_ptr<std::vector<char>>;

}  // namespace loom_ucx

struct loom_comm {
  loom_collective_ctx *ctx = nullptr;
  loom::cxx::CommError error;  // comm_last_error: the last failed call's message
  loom_ucx::Worker *worker = nullptr;  // the instance's worker it lives on
  int32_t rank = 0, size = 0;
  uint16_t id = 0;
  bool ready = false;      // endpoints created; the progress engine may touch it
  int64_t timeout_ms = 0;  // default for waits on this communicator
  char name[64] = "";      // label for messages
  std::vector<loom_ucx::Peer> peers;
  // Every pair of members may use cross-memory attach (one host): the same
  // answer on every rank, as all derive it from the same identities, so
  // algorithms may shape their messages by it.
  bool cma_everywhere = false;

  std::atomic<bool> aborted{false};
  std::atomic<int64_t> live_requests{0};  // posted and not yet freed

  // comm_stats (ABI 1.11): the traffic of the operations that completed
  // here. Written by the progress engine, read by any thread, lock-free.
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0}, messages_sent{0}, messages_received{0}, operations{0};

  // A dead peer makes the communicator unusable.
  bool failed = false;
  int32_t failed_rank = -1;
  char failed_why[256] = "";
  bool notify_failure = false;  // tell the other members (control message)

  uint32_t next_seq = 0;  // collective operations posted so far
  loom_ucx::Xfer control_recv;
  loom_ucx::ControlMessage control_in{};
  std::deque<loom_ucx::ControlSend> control_sends;
  // Operations other ranks reported as invalid before this rank posted them.
  std::vector<std::pair<uint32_t, int32_t>> invalid_seqs;

  // Operations freed while UCX still held some of their requests.
  std::vector<loom_request *> zombies;
  loom_ucx::Scratch scratch;
};

namespace loom_ucx {

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) noexcept;
loom_status comm_destroy(loom_comm *comm) noexcept;
loom_status comm_abort(loom_comm *comm) noexcept;
loom_status comm_stats(loom_comm *comm, loom_comm_stats_v1 *stats) noexcept;

// Marks the communicator failed because of `rank` (first reason wins) and
// schedules telling the other members. Call with the instance mutex held.
void mark_failed(loom_comm *comm, int32_t rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Sends one control message to every member but this rank and the failed
// ones. Call with the instance mutex held.
void broadcast_control(loom_comm *comm, ControlType type, uint32_t seq, int32_t subject);

// Polls the communicator's control channel, its background sends and its
// abandoned operations. Call with the instance mutex held.
void service(loom_comm *comm);

// Reads the state of the members' processes on this host (progress_all
// calls it every process_check_ms); a member found exited (or gone) at two
// looks in a row fails the communicator, as UCX's error callback would. Two
// looks: data a member sent just before it exited is taken first. Call with
// the instance mutex held.
void check_processes(loom_comm *comm);

// A scratch buffer of at least `bytes` not in use by any other operation.
Scratch take_scratch(loom_comm *comm, size_t bytes);

}  // namespace loom_ucx

#endif  // LOOM_UCX_COMM_H
