/* SPDX-License-Identifier: Apache-2.0 */
// A posted operation (loom_request) and the interface of the algorithms that
// run it. An algorithm is a non-blocking state machine: advance() posts what
// its dependencies allow, consumes what has arrived and returns; the
// progress engine calls it from test, wait and every other waiter of the
// instance, so nothing ever blocks inside an algorithm.
//
// Argument checks across ranks: every collective's first message from each
// sender to each receiver (message index 0) starts with the sender's
// WireHeader, and a receiver uses no data of a sender before it has compared
// that header with its own. In addition each rank always receives a message
// 0 from its left neighbour (rank - 1) and sends one to its right: when the
// algorithm has no such message the operation sends a header alone. Any
// difference among the ranks therefore shows up between some pair of
// neighbours, however the ranks chose their algorithms; the rank that sees it
// fails the operation with INVALID_ARGUMENT and tells every member, so all
// fail promptly instead of timing out.
#ifndef LOOM_UCX_OP_H
#define LOOM_UCX_OP_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backoff.h"
#include "comm.h"
#include "loom/collective.h"
#include "wire.h"
#include "xfer.h"

namespace loom_ucx {

enum class Step { kRunning, kDone };

// Algorithm ids, carried in the header for the mismatch message.
enum AlgorithmId : uint8_t {
  kAlgLocal = 1,
  kAlgHeaderOnly,
  kAlgRecursiveDoubling,
  kAlgRing,
  kAlgBinomial,
  kAlgBinomialPipelined,
  kAlgPairwise,
  kAlgPairwiseInPlace,
  kAlgDissemination,
  kAlgPointToPoint,
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // Moves the operation forward; kDone once every send and receive has
  // finished and the result is in place. On an error it calls op.fail().
  virtual Step advance(loom_request &op) = 0;
  // Whether the algorithm's own message 0 goes to the right neighbour /
  // comes from the left one (else the operation adds a header-only one).
  virtual bool sends_right() const = 0;
  virtual bool receives_left() const = 0;
  // Every transfer it may have in flight (to cancel, drain or free them).
  virtual void for_each_xfer(const std::function<void(Xfer &)> &fn) = 0;
};

}  // namespace loom_ucx

struct loom_request {
  loom_comm *comm = nullptr;
  const char *name = "";
  bool collective = true;
  uint32_t seq = 0;
  loom_ucx::WireHeader header{};  // this rank's

  // Arguments.
  const void *send = nullptr;
  void *recv = nullptr;
  uint64_t count = 0;
  loom_dtype dtype = 0;
  loom_reduce_op reduce_op = 0;
  double scale = 1.0;  // kReduceScaledSum's factor
  int32_t root = -1;
  size_t elem = 0;  // bytes per element

  std::unique_ptr<loom_ucx::Algorithm> alg;
  loom_ucx::Scratch scratch;  // held while UCX may write into it

  // Header-only messages on the ring edges, when the algorithm has none.
  bool ring_out_used = false, ring_in_used = false, ring_in_checked = false;
  loom_ucx::Xfer ring_out, ring_in;
  loom_ucx::WireHeader ring_in_header{};

  // Its messages so far, counted as they are posted; they join the
  // communicator's comm_stats when the operation completes successfully.
  uint64_t bytes_out = 0, bytes_in = 0, messages_out = 0, messages_in = 0;

  bool finished = false;
  loom_status status = LOOM_OK;
  std::string error;  // the message when status != LOOM_OK
  // After a failure, receives are cancelled and drained before the
  // operation reports its end, so no late data lands in the caller's buffer.
  bool draining = false;
  loom_ucx::Clock::time_point drain_deadline;

  loom_request *prev = nullptr, *next = nullptr;  // the instance's active list
  bool active = false;
};

namespace loom_ucx {

// Builds the request for a collective (taking the next sequence number) or a
// point-to-point operation. Call with the instance mutex held.
std::unique_ptr<loom_request> new_op(loom_comm *comm, const char *name, bool collective);

// Starts a built operation: ring-edge headers, first advance; puts it on the
// active list. Call with the instance mutex held.
void start_op(loom_request *op);

// One step of the engine for op (see Algorithm). Mutex held.
void advance_op(loom_request *op);

// Ends op with status s and message (first failure wins) and begins draining.
void fail_op(loom_request *op, loom_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Whether any transfer of op is still in UCX's hands.
bool has_pending(loom_request *op);

// Cancels op's pending receives (a cancelled receive ends at once, one
// already matched finishes its data first).
void cancel_receives(loom_request *op);

// Takes op off the active list. Mutex held.
void unlink_op(loom_request *op);

// --- for algorithms ---

// Posts message `sub` of op to / from rank `peer`.
void send_to(loom_request &op, Xfer &x, int peer, uint32_t sub, const void *buf, size_t len);
void recv_from(loom_request &op, Xfer &x, int peer, uint32_t sub, void *buf, size_t len);
// Checks a finished receive from `peer`: success and exactly `expected`
// bytes. Fails op and returns false otherwise.
bool received_ok(loom_request &op, const Xfer &x, int peer, size_t expected);
// Checks a finished send. Fails op and returns false on error.
bool sent_ok(loom_request &op, const Xfer &x, int peer);
// Compares the header at p (from `peer`) with this rank's; on a difference
// fails op with INVALID_ARGUMENT naming both, tells every member, returns false.
bool header_ok(loom_request &op, const void *p, int peer);

}  // namespace loom_ucx

#endif  // LOOM_UCX_OP_H
