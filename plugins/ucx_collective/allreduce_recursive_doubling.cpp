// SPDX-License-Identifier: Apache-2.0
// Allreduce for small messages: recursive doubling. With p the largest power
// of two <= n and rem = n - p, the first 2*rem ranks pair up: each even one
// hands its vector to the odd one above it and waits for the result. The p
// remaining ranks exchange their whole vectors with partners at distance 1,
// 2, 4... (log2 p steps) and reduce, always as op(lower rank's, higher
// rank's) so every rank ends with the same bits. Every message is staged
// with its header in front: one message per link, which is what small
// payloads want.
#include <cstring>
#include <vector>

#include "algorithms.h"
#include "reduce.h"

namespace loom_ucx {
namespace {

class AllreduceRecursiveDoubling : public Algorithm {
 public:
  explicit AllreduceRecursiveDoubling(loom_request &op)
      : n_(op.comm->size), r_(op.comm->rank), bytes_(size_t(op.count) * op.elem),
        buf_(2 * (sizeof(WireHeader) + bytes_)) {
    p_ = 1;
    while (p_ * 2 <= n_) p_ *= 2;
    rem_ = n_ - p_;
    if (r_ < 2 * rem_) newrank_ = (r_ % 2 == 0) ? -1 : r_ / 2;
    else newrank_ = r_ - rem_;
    acc_ = static_cast<char *>(op.recv);
    if (op.send != op.recv && bytes_) std::memcpy(acc_, op.send, bytes_);
    phase_ = newrank_ < 0 ? kExtra : (r_ < 2 * rem_ ? kFoldIn : kSteps);
  }

  Step advance(loom_request &op) override {
    for (;;) {
      switch (phase_) {
        case kExtra:  // hand the vector up, wait for the result
          if (!posted_) {
            recv(op, r_ + 1);
            send(op, r_ + 1);
          }
          if (!exchanged(op, r_ + 1)) return Step::kRunning;
          std::memcpy(acc_, payload(rbuf()), bytes_);
          phase_ = kDone;  // the operation may call again while its ring-edge header is on the way
          break;
        case kFoldIn:  // take the even neighbour's vector in
          if (!posted_) recv(op, r_ - 1);
          if (!exchanged(op, r_ - 1)) return Step::kRunning;
          reduce(op.dtype, op.reduce_op, acc_, payload(rbuf()), acc_, op.count);
          phase_ = kSteps;
          break;
        case kSteps: {
          if (mask_ >= p_) {
            finish_block(op.reduce_op, op.scale, n_, acc_, op.count, op.dtype);
            phase_ = r_ < 2 * rem_ ? kFoldOut : kDone;
            break;
          }
          const int nr = newrank_ ^ mask_;
          const int partner = nr < rem_ ? nr * 2 + 1 : nr + rem_;
          if (!posted_) {
            recv(op, partner);
            send(op, partner);
          }
          if (!exchanged(op, partner)) return Step::kRunning;
          if (partner < r_) reduce(op.dtype, op.reduce_op, acc_, payload(rbuf()), acc_, op.count);
          else reduce(op.dtype, op.reduce_op, acc_, acc_, payload(rbuf()), op.count);
          mask_ <<= 1;
          break;
        }
        case kFoldOut:  // hand the result back down
          if (!posted_) send(op, r_ - 1);
          if (!exchanged(op, r_ - 1)) return Step::kRunning;
          phase_ = kDone;
          break;
        case kDone: return Step::kDone;
      }
    }
  }

  // Every link carries one message each way, so sending to and receiving
  // from a peer go together.
  bool sends_right() const override { return talks_to((r_ + 1) % n_); }
  bool receives_left() const override { return talks_to((r_ + n_ - 1) % n_); }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override {
    fn(sx_);
    fn(rx_);
  }

 private:
  enum Phase { kExtra, kFoldIn, kSteps, kFoldOut, kDone };

  char *sbuf() { return buf_.data(); }
  char *rbuf() { return buf_.data() + sizeof(WireHeader) + bytes_; }
  static char *payload(char *staged) { return staged + sizeof(WireHeader); }

  void send(loom_request &op, int peer) {
    std::memcpy(sbuf(), &op.header, sizeof(WireHeader));
    if (bytes_) std::memcpy(payload(sbuf()), acc_, bytes_);
    send_to(op, sx_, peer, 0, sbuf(), sizeof(WireHeader) + bytes_);
    posted_ = true;
  }
  void recv(loom_request &op, int peer) {
    recv_from(op, rx_, peer, 0, rbuf(), sizeof(WireHeader) + bytes_);
    posted_ = true;
  }
  // Whether this step's transfers (those posted) finished well; checks the
  // received header. Resets for the next step when true.
  bool exchanged(loom_request &op, int peer) {
    if (sx_.pending() && !sx_.poll()) return false;
    if (rx_.pending() && !rx_.poll()) return false;
    if (sx_.posted && !sent_ok(op, sx_, peer)) return false;
    if (rx_.posted && (!received_ok(op, rx_, peer, sizeof(WireHeader) + bytes_) || !header_ok(op, rbuf(), peer)))
      return false;
    sx_ = Xfer{};
    rx_ = Xfer{};
    posted_ = false;
    return true;
  }

  // Whether this rank exchanges messages with `peer` at all.
  bool talks_to(int peer) const {
    if (peer == r_) return false;
    if (newrank_ < 0) return peer == r_ + 1;                   // the extra rank's one partner
    if (r_ < 2 * rem_ && peer == r_ - 1) return true;          // fold in (receive) and out (send)
    for (int m = 1; m < p_; m <<= 1) {
      const int nr = newrank_ ^ m;
      if ((nr < rem_ ? nr * 2 + 1 : nr + rem_) == peer) return true;
    }
    return false;
  }

  int n_, r_, p_ = 1, rem_ = 0, newrank_ = 0, mask_ = 1;
  size_t bytes_;
  std::vector<char> buf_;
  char *acc_;
  Phase phase_;
  bool posted_ = false;
  Xfer sx_, rx_;
};

}  // namespace

std::unique_ptr<Algorithm> make_allreduce_recursive_doubling(loom_request &op) {
  return std::make_unique<AllreduceRecursiveDoubling>(op);
}

}  // namespace loom_ucx
