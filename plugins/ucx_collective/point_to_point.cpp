// SPDX-License-Identifier: Apache-2.0
// send / recv: one message each way, tagged with a per-pair sequence number
// so that messages between two ranks are received in posting order whatever
// their size or protocol. Sizes must agree: a longer message is truncated by
// UCX and a shorter one is caught here, both as INVALID_ARGUMENT.
#include "algorithms.h"
#include "error.h"
#include "instance.h"

namespace loom_ucx {
namespace {

class PointToPoint : public Algorithm {
 public:
  PointToPoint(loom_request &op, int peer, bool sending) : peer_(peer), sending_(sending) {
    Peer &p = op.comm->peers[size_t(peer)];
    const size_t bytes = size_t(op.count) * op.elem;
    if (sending_) {
      op.bytes_out += bytes;
      ++op.messages_out;
      post_send(p.ep, x_, p2p_tag(p.comm_id, uint32_t(op.comm->rank), p.send_seq++ & 0x3fffffffu), op.send, bytes);
    } else {
      expected_ = bytes;
      op.bytes_in += bytes;
      ++op.messages_in;
      post_recv(op.comm->worker->handle, x_, p2p_tag(op.comm->id, uint32_t(peer), p.recv_seq++ & 0x3fffffffu),
                kFullMask, op.recv, bytes);
    }
  }

  Step advance(loom_request &op) override {
    if (!x_.done && !x_.poll()) {
      // A receive from a rank known dead will never be matched.
      if (!sending_ && op.comm->peers[size_t(peer_)].failed)
        fail_op(&op, LOOM_ERR_PEER_FAILED, "recv on communicator \"%s\": %s", op.comm->name, op.comm->failed_why);
      return Step::kRunning;
    }
    if (sending_) return sent_ok(op, x_, peer_) ? Step::kDone : Step::kRunning;
    if (x_.status == UCS_ERR_MESSAGE_TRUNCATED) {
      fail_op(&op, LOOM_ERR_INVALID_ARGUMENT,
              "recv on communicator \"%s\": rank %d sent more than the %zu bytes expected (counts or dtypes differ)",
              op.comm->name, peer_, expected_);
      return Step::kRunning;
    }
    if (x_.status != UCS_OK) return received_ok(op, x_, peer_, expected_) ? Step::kDone : Step::kRunning;
    if (x_.length != expected_) {
      fail_op(&op, LOOM_ERR_INVALID_ARGUMENT,
              "recv on communicator \"%s\": expected %zu bytes from rank %d but the message had %zu (counts or dtypes "
              "differ)",
              op.comm->name, expected_, peer_, x_.length);
      return Step::kRunning;
    }
    return Step::kDone;
  }

  bool sends_right() const override { return false; }
  bool receives_left() const override { return false; }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override { fn(x_); }

 private:
  int peer_;
  bool sending_;
  size_t expected_ = 0;
  Xfer x_;
};

}  // namespace

std::unique_ptr<Algorithm> make_send(loom_request &op, int peer) {
  return std::make_unique<PointToPoint>(op, peer, true);
}
std::unique_ptr<Algorithm> make_recv(loom_request &op, int peer) {
  return std::make_unique<PointToPoint>(op, peer, false);
}

}  // namespace loom_ucx
