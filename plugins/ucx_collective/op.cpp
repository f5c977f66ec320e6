// SPDX-License-Identifier: Apache-2.0
// The life of an operation: start, advance, fail, drain, finish.
#include "op.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "error.h"
#include "instance.h"
#include "reduce.h"

namespace loom_ucx {
namespace {

int left_of(const loom_comm *c) { return (c->rank + c->size - 1) % c->size; }
int right_of(const loom_comm *c) { return (c->rank + 1) % c->size; }

void finish(loom_request *op, loom_status s) {
  op->finished = true;
  op->status = s;
  unlink_op(op);
  if (s == LOOM_OK) {
    loom_comm *c = op->comm;
    c->bytes_sent.fetch_add(op->bytes_out, std::memory_order_relaxed);
    c->bytes_received.fetch_add(op->bytes_in, std::memory_order_relaxed);
    c->messages_sent.fetch_add(op->messages_out, std::memory_order_relaxed);
    c->messages_received.fetch_add(op->messages_in, std::memory_order_relaxed);
    c->operations.fetch_add(1, std::memory_order_relaxed);
  }
}

void for_each_xfer(loom_request *op, const std::function<void(Xfer &)> &fn) {
  if (op->ring_out_used) fn(op->ring_out);
  if (op->ring_in_used) fn(op->ring_in);
  if (op->alg) op->alg->for_each_xfer(fn);
}

// "allreduce of 100 f32 (sum)", for mismatch messages.
void describe(const WireHeader &h, char *out, size_t len) {
  int n = std::snprintf(out, len, "%s of %llu %s", op_kind_name(h.op), static_cast<unsigned long long>(h.count),
                        dtype_name(h.dtype));
  if (n < 0 || size_t(n) >= len) return;
  if (h.reduce_op == kReduceScaledSum) {
    double s;
    std::memcpy(&s, &h.scale_bits, sizeof s);
    n += std::snprintf(out + n, len - size_t(n), " (sum scaled by %.17g)", s);
  } else if (h.reduce_op) {
    n += std::snprintf(out + n, len - size_t(n), " (%s)", reduce_op_name(h.reduce_op));
  }
  if (n >= 0 && size_t(n) < len && h.root >= 0) std::snprintf(out + n, len - size_t(n), " at root %d", h.root);
}

// A size or header disagreement: fail here and tell everyone.
void mismatch(loom_request &op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mismatch(loom_request &op, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (op.status == LOOM_OK) broadcast_control(op.comm, kControlInvalid, op.seq, op.comm->rank);
  fail_op(&op, LOOM_ERR_INVALID_ARGUMENT, "%s", text);
}

}  // namespace

std::unique_ptr<loom_request> new_op(loom_comm *comm, const char *name, bool collective) {
  auto op = std::make_unique<loom_request>();
  op->comm = comm;
  op->name = name;
  op->collective = collective;
  if (collective) op->seq = comm->next_seq++;
  return op;
}

void start_op(loom_request *op) {
  loom_comm *c = op->comm;
  loom_collective_ctx *ctx = c->ctx;
  op->next = ctx->active;
  if (ctx->active) ctx->active->prev = op;
  ctx->active = op;
  op->active = true;
  if (op->collective && c->size > 1) {
    if (!op->alg->sends_right()) {
      op->ring_out_used = true;
      send_to(*op, op->ring_out, right_of(c), 0, &op->header, sizeof op->header);
    }
    if (!op->alg->receives_left()) {
      op->ring_in_used = true;
      recv_from(*op, op->ring_in, left_of(c), 0, &op->ring_in_header, sizeof op->ring_in_header);
    }
    for (size_t i = 0; i < c->invalid_seqs.size(); ++i) {
      if (c->invalid_seqs[i].first != op->seq) continue;
      fail_op(op, LOOM_ERR_INVALID_ARGUMENT,
              "%s on communicator \"%s\": rank %d found that the ranks' arguments for this operation differ", op->name,
              c->name, c->invalid_seqs[i].second);
      c->invalid_seqs.erase(c->invalid_seqs.begin() + long(i));
      break;
    }
  }
  advance_op(op);
}

void advance_op(loom_request *op) {
  if (op->finished) return;
  loom_comm *c = op->comm;
  if (c->aborted.load(std::memory_order_acquire)) {
    if (op->status == LOOM_OK) {
      op->status = LOOM_ERR_ABORTED;
      op->error = std::string(op->name) + " on communicator \"" + c->name + "\": the communicator was aborted";
    }
    finish(op, op->status);  // its transfers stay with UCX until request_free / comm_destroy
    return;
  }
  if (!op->draining) {
    if (op->ring_in_used && !op->ring_in_checked && op->ring_in.poll()) {
      const int left = left_of(c);
      op->ring_in_checked =
          received_ok(*op, op->ring_in, left, sizeof(WireHeader)) && header_ok(*op, &op->ring_in_header, left);
    }
    if (op->ring_out_used && op->ring_out.pending() && op->ring_out.poll()) sent_ok(*op, op->ring_out, right_of(c));
    const Step step = op->status == LOOM_OK ? op->alg->advance(*op) : Step::kRunning;
    // A cross-memory-attach receive moves only when polled (the read and
    // the answer happen in poll), and an algorithm may look at its receives
    // only after its sends are over, which in turn wait for the peer's
    // receive: poll them all here, so no ordering of polls can deadlock.
    for_each_xfer(op, [](Xfer &x) {
      if (x.mode == Xfer::kCmaRecv && x.pending()) x.poll();
    });
    if (op->status == LOOM_OK) {
      const bool ring_done = (!op->ring_in_used || op->ring_in_checked) && (!op->ring_out_used || op->ring_out.done);
      if (step == Step::kDone && ring_done) {
        finish(op, LOOM_OK);
        return;
      }
      if (c->failed)
        fail_op(op, LOOM_ERR_PEER_FAILED, "%s on communicator \"%s\": %s", op->name, c->name, c->failed_why);
    }
  }
  if (op->draining) {
    bool receiving = false;
    for_each_xfer(op, [&](Xfer &x) {
      if (x.pending() && !x.poll() && x.receiving()) receiving = true;
    });
    if (!receiving || Clock::now() >= op->drain_deadline) finish(op, op->status);
  }
}

void fail_op(loom_request *op, loom_status s, const char *fmt, ...) {
  if (op->status != LOOM_OK || op->finished) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  op->status = s;
  op->error = text;
  cancel_receives(op);
  // While the communicator lives on (mismatched arguments), receives already
  // matched finish landing before the caller gets its buffers back; the
  // peers are alive and progressing, so that takes moments. After a peer
  // failure nobody may be left to finish them: the buffers stay borrowed
  // until comm_destroy, as after an abort.
  if (s == LOOM_ERR_PEER_FAILED) {
    finish(op, s);
    return;
  }
  op->draining = true;
  const int64_t bound = op->comm->timeout_ms < 1000 ? op->comm->timeout_ms : 1000;
  op->drain_deadline = Clock::now() + std::chrono::milliseconds(bound);
}

bool has_pending(loom_request *op) {
  bool pending = false;
  for_each_xfer(op, [&](Xfer &x) {
    if (x.pending() && !x.poll()) pending = true;
  });
  return pending;
}

void cancel_receives(loom_request *op) {
  for_each_xfer(op, [&](Xfer &x) { x.cancel(); });
}

void unlink_op(loom_request *op) {
  if (!op->active) return;
  loom_collective_ctx *ctx = op->comm->ctx;
  if (op->prev) op->prev->next = op->next;
  else ctx->active = op->next;
  if (op->next) op->next->prev = op->prev;
  op->prev = op->next = nullptr;
  op->active = false;
}

// Whether a message of len bytes to or from peer goes by cross-memory
// attach (cma.h); both ends compute the same answer.
bool use_cma(const loom_request &op, const Peer &p, size_t len) {
  const int64_t threshold = op.comm->ctx->tuning.cma_threshold;
  return p.cma_pid != 0 && threshold >= 0 && len >= uint64_t(threshold);
}

void send_to(loom_request &op, Xfer &x, int peer, uint32_t sub, const void *buf, size_t len) {
  const Peer &p = op.comm->peers[size_t(peer)];
  const uint64_t tag = collective_tag(p.comm_id, uint32_t(op.comm->rank), op.seq, sub);
  op.bytes_out += len;
  ++op.messages_out;
  if (use_cma(op, p, len))
    post_send_cma(op.comm->worker->handle, p.ep, x, tag, cma_ack_tag(op.comm->id, uint32_t(peer), tag), buf, len);
  else
    post_send(p.ep, x, tag, buf, len);
}

void recv_from(loom_request &op, Xfer &x, int peer, uint32_t sub, void *buf, size_t len) {
  const Peer &p = op.comm->peers[size_t(peer)];
  const uint64_t tag = collective_tag(op.comm->id, uint32_t(peer), op.seq, sub);
  op.bytes_in += len;  // a receive that completes has exactly len bytes (received_ok)
  ++op.messages_in;
  if (use_cma(op, p, len))
    post_recv_cma(op.comm->worker->handle, p.ep, x, tag, cma_ack_tag(p.comm_id, uint32_t(op.comm->rank), tag),
                  p.cma_pid, buf, len);
  else
    post_recv(op.comm->worker->handle, x, tag, kFullMask, buf, len);
}

bool received_ok(loom_request &op, const Xfer &x, int peer, size_t expected) {
  if (op.status != LOOM_OK) return false;
  // Aborted while this receive ran (a long cross-memory-attach read stops
  // early): the engine's next pass ends the operation ABORTED.
  if (op.comm->aborted.load(std::memory_order_acquire)) return false;
  if (x.status == UCS_ERR_MESSAGE_TRUNCATED) {
    mismatch(op,
             "%s on communicator \"%s\": rank %d sent more than the %zu bytes this rank expected; the ranks disagree "
             "on count, dtype or the algorithm options",
             op.name, op.comm->name, peer, expected);
    return false;
  }
  if (x.status != UCS_OK) {
    loom_comm *c = op.comm;
    if (x.mode == Xfer::kCmaRecv && x.status == UCS_ERR_CONNECTION_RESET)  // its process is gone
      mark_failed(c, peer, "rank %d failed (its process no longer exists)", peer);
    // The memory it offered is gone while this rank read it: it left the
    // operation (aborted, destroyed the communicator, freed the buffer).
    if (x.mode == Xfer::kCmaRecv && x.read_errno == EFAULT)
      mark_failed(c, peer, "rank %d left the operation (the memory it offered is gone)", peer);
    if (c->failed) fail_op(&op, LOOM_ERR_PEER_FAILED, "%s on communicator \"%s\": %s", op.name, c->name, c->failed_why);
    else
      fail_op(&op, status_of(x.status), "%s on communicator \"%s\": receiving from rank %d failed: %s%s", op.name,
              c->name, peer, ucs_status_string(x.status),
              x.mode == Xfer::kCmaRecv ? " (reading its memory by cross-memory attach; cma_threshold_bytes = -1 "
                                         "turns that off)"
                                       : "");
    return false;
  }
  if (x.length != expected) {
    mismatch(op,
             "%s on communicator \"%s\": rank %d sent %zu bytes where this rank expected %zu; the ranks disagree on "
             "count, dtype or the algorithm options",
             op.name, op.comm->name, peer, x.length, expected);
    return false;
  }
  return true;
}

bool sent_ok(loom_request &op, const Xfer &x, int peer) {
  if (x.status == UCS_OK) return true;
  loom_comm *c = op.comm;
  if (op.status != LOOM_OK) return false;
  if (status_of(x.status) == LOOM_ERR_PEER_FAILED)
    mark_failed(c, peer, "rank %d failed (sending to it: %s)", peer, ucs_status_string(x.status));
  if (c->failed) fail_op(&op, LOOM_ERR_PEER_FAILED, "%s on communicator \"%s\": %s", op.name, c->name, c->failed_why);
  else
    fail_op(&op, status_of(x.status), "%s on communicator \"%s\": sending to rank %d failed: %s", op.name, c->name,
            peer, ucs_status_string(x.status));
  return false;
}

bool header_ok(loom_request &op, const void *p, int peer) {
  WireHeader theirs;
  std::memcpy(&theirs, p, sizeof theirs);
  const WireHeader &mine = op.header;
  if (theirs.magic == mine.magic && theirs.op == mine.op && theirs.dtype == mine.dtype &&
      theirs.reduce_op == mine.reduce_op && theirs.algorithm == mine.algorithm && theirs.count == mine.count &&
      theirs.root == mine.root && theirs.seq == mine.seq && theirs.chunk_bytes == mine.chunk_bytes &&
      theirs.scale_bits == mine.scale_bits)
    return true;
  char a[160], b[160];
  describe(theirs, a, sizeof a);
  describe(mine, b, sizeof b);
  const char *why = theirs.magic != mine.magic ? " (not a header of this plugin version)"
                    : (theirs.algorithm != mine.algorithm || theirs.chunk_bytes != mine.chunk_bytes) &&
                            theirs.count == mine.count && theirs.dtype == mine.dtype && theirs.op == mine.op
                        ? " (same arguments, different algorithm options: set the ucx options alike on every rank)"
                        : "";
  mismatch(op, "%s on communicator \"%s\": rank %d posted %s, this rank (%d) posted %s%s", op.name, op.comm->name,
           peer, a, op.comm->rank, b, why);
  return false;
}

}  // namespace loom_ucx
