// SPDX-License-Identifier: Apache-2.0
// The control channel of a communicator: "operation N has mismatched
// arguments" and "rank R died", so that every member fails promptly, not
// only those that talk to the rank that noticed.
#include <cstdio>

#include "comm.h"
#include "instance.h"
#include "op.h"

namespace loom_ucx {
namespace {

// Whether sequence number a comes at or after b (numbers wrap).
bool at_or_after(uint32_t a, uint32_t b) { return int32_t(a - b) >= 0; }

void handle(loom_comm *comm, const ControlMessage &m) {
  if (m.magic != kHeaderMagic || m.from < 0 || m.from >= comm->size) return;
  if (m.type == kControlPeerFailed) {
    if (m.subject >= 0 && m.subject < comm->size)
      mark_failed(comm, m.subject, "rank %d failed (reported by rank %d)", m.subject, m.from);
    comm->notify_failure = false;  // the reporter tells everyone itself
    return;
  }
  if (m.type != kControlInvalid) return;
  for (loom_request *op = comm->ctx->active; op; op = op->next) {
    if (op->comm != comm || !op->collective || op->seq != m.seq) continue;
    fail_op(op, LOOM_ERR_INVALID_ARGUMENT,
            "%s on communicator \"%s\": rank %d found that the ranks' arguments for this operation differ", op->name,
            comm->name, m.from);
    return;
  }
  // Not posted here yet: remembered for when it is (a few at most).
  if (at_or_after(m.seq, comm->next_seq) && comm->invalid_seqs.size() < 64)
    comm->invalid_seqs.emplace_back(m.seq, m.from);
}

}  // namespace

void broadcast_control(loom_comm *comm, ControlType type, uint32_t seq, int32_t subject) {
  for (int32_t r = 0; r < comm->size; ++r) {
    const Peer &p = comm->peers[size_t(r)];
    if (r == comm->rank || p.failed || !p.ep || r == comm->failed_rank) continue;
    comm->control_sends.emplace_back();
    ControlSend &cs = comm->control_sends.back();
    cs.msg = ControlMessage{kHeaderMagic, uint32_t(type), seq, subject, comm->rank, 0};
    post_send(p.ep, cs.xfer, make_tag(p.comm_id, kClassControl, uint32_t(comm->rank), 0), &cs.msg, sizeof cs.msg);
  }
}

void service(loom_comm *comm) {
  while (comm->control_recv.posted && comm->control_recv.poll()) {
    if (comm->control_recv.status != UCS_OK) {
      comm->control_recv = Xfer{};  // cancelled or broken: the communicator is going away
      break;
    }
    if (comm->control_recv.length == sizeof comm->control_in) handle(comm, comm->control_in);
    post_recv(comm->worker->handle, comm->control_recv, make_tag(comm->id, kClassControl, 0, 0), kControlMask,
              &comm->control_in, sizeof comm->control_in);
  }
  if (comm->notify_failure) {
    comm->notify_failure = false;
    broadcast_control(comm, kControlPeerFailed, 0, comm->failed_rank);
  }
  while (!comm->control_sends.empty()) {
    Xfer &x = comm->control_sends.front().xfer;
    if (x.pending() && !x.poll()) break;
    comm->control_sends.pop_front();
  }
  for (size_t i = 0; i < comm->zombies.size();) {
    loom_request *z = comm->zombies[i];
    if (has_pending(z)) {
      ++i;
      continue;
    }
    delete z;
    comm->zombies[i] = comm->zombies.back();
    comm->zombies.pop_back();
  }
}

}  // namespace loom_ucx
