// SPDX-License-Identifier: Apache-2.0
// Alltoall: every rank sends block d to rank d and receives block s from rank
// s, all pairs posted at once (rank r + k and r - k for k = 1..n-1, so the
// first pair is the ring neighbours). Small blocks travel staged behind their
// header; large ones go straight from send into recv after a header-only
// message. In place, send is copied aside first, since recv overwrites it.
#include <cstring>
#include <vector>

#include "algorithms.h"
#include "instance.h"

namespace loom_ucx {
namespace {

class AlltoallPairwise : public Algorithm {
 public:
  AlltoallPairwise(loom_request &op, bool direct)
      : n_(op.comm->size), r_(op.comm->rank), direct_(direct), block_(size_t(op.count) * op.elem),
        sends_(size_t(n_)), recvs_(size_t(n_)), hdr_out_(size_t(n_)), hdr_in_(size_t(n_)), hdr_in_buf_(size_t(n_)) {
    const char *send = static_cast<const char *>(op.send);
    char *recv = static_cast<char *>(op.recv);
    if (direct_) {
      source_ = send;
      if (op.send == op.recv) {
        op.scratch = take_scratch(op.comm, block_ * size_t(n_));
        std::memcpy(op.scratch->data(), send, block_ * size_t(n_));
        source_ = op.scratch->data();
      }
    } else {
      const size_t staged = sizeof(WireHeader) + block_;
      buf_.resize(2 * staged * size_t(n_));  // outgoing, then incoming, one per rank
      for (int d = 0; d < n_; ++d) {
        char *out = buf_.data() + staged * size_t(d);
        std::memcpy(out, &op.header, sizeof(WireHeader));
        std::memcpy(out + sizeof(WireHeader), send + block_ * size_t(d), block_);
      }
    }
    if (op.send != op.recv) std::memcpy(recv + block_ * size_t(r_), send + block_ * size_t(r_), block_);
  }

  Step advance(loom_request &op) override {
    const size_t staged = sizeof(WireHeader) + block_;
    char *recv = static_cast<char *>(op.recv);
    if (!started_) {
      for (int k = 1; k < n_; ++k) {
        const int d = (r_ + k) % n_, s = (r_ - k + n_) % n_;
        if (direct_) {
          recv_from(op, hdr_in_[size_t(s)], s, 0, &hdr_in_buf_[size_t(s)], sizeof(WireHeader));
          recv_from(op, recvs_[size_t(s)], s, 1, recv + block_ * size_t(s), block_);
          send_to(op, hdr_out_[size_t(d)], d, 0, &op.header, sizeof(WireHeader));
          send_to(op, sends_[size_t(d)], d, 1, source_ + block_ * size_t(d), block_);
        } else {
          recv_from(op, recvs_[size_t(s)], s, 0, buf_.data() + staged * size_t(n_ + s), staged);
          send_to(op, sends_[size_t(d)], d, 0, buf_.data() + staged * size_t(d), staged);
        }
      }
      started_ = true;
    }
    bool done = true;
    for (int s = 0; s < n_; ++s) {
      if (s == r_) continue;
      const size_t i = size_t(s);
      if (direct_ && !hdr_ok(op, s)) done = false;
      Xfer &x = recvs_[i];
      if (checked_.size() < size_t(n_)) checked_.assign(size_t(n_), false);
      if (checked_[i]) continue;
      if (!x.done && !x.poll()) {
        done = false;
        continue;
      }
      if (direct_) {
        if (!hdr_ok(op, s)) {
          done = false;
          continue;
        }
        if (!received_ok(op, x, s, block_)) return Step::kRunning;
      } else {
        const char *msg = buf_.data() + staged * size_t(n_ + s);
        if (!received_ok(op, x, s, staged) || !header_ok(op, msg, s)) return Step::kRunning;
        std::memcpy(recv + block_ * i, msg + sizeof(WireHeader), block_);
      }
      checked_[i] = true;
    }
    for (int d = 0; d < n_; ++d) {
      if (d == r_) continue;
      for (Xfer *x : {&sends_[size_t(d)], &hdr_out_[size_t(d)]}) {
        if (!x->posted) continue;
        if (!x->done && !x->poll()) {
          done = false;
          continue;
        }
        if (!sent_ok(op, *x, d)) return Step::kRunning;
      }
    }
    return done ? Step::kDone : Step::kRunning;
  }

  bool sends_right() const override { return n_ > 1; }
  bool receives_left() const override { return n_ > 1; }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override {
    for (auto *v : {&sends_, &recvs_, &hdr_out_, &hdr_in_})
      for (Xfer &x : *v) fn(x);
  }

 private:
  // Whether rank s's header arrived and matches (direct mode).
  bool hdr_ok(loom_request &op, int s) {
    const size_t i = size_t(s);
    if (hdr_checked_.size() < size_t(n_)) hdr_checked_.assign(size_t(n_), false);
    if (hdr_checked_[i]) return true;
    Xfer &h = hdr_in_[i];
    if (!h.done && !h.poll()) return false;
    if (!received_ok(op, h, s, sizeof(WireHeader)) || !header_ok(op, &hdr_in_buf_[i], s)) return false;
    hdr_checked_[i] = true;
    return true;
  }

  int n_, r_;
  bool direct_;
  size_t block_;
  const char *source_ = nullptr;
  std::vector<char> buf_;
  std::vector<Xfer> sends_, recvs_, hdr_out_, hdr_in_;
  std::vector<WireHeader> hdr_in_buf_;
  std::vector<bool> checked_, hdr_checked_;
  bool started_ = false;
};

}  // namespace

std::unique_ptr<Algorithm> make_alltoall_pairwise(loom_request &op, bool direct) {
  return std::make_unique<AlltoallPairwise>(op, direct);
}

}  // namespace loom_ucx
