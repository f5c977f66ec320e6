// SPDX-License-Identifier: Apache-2.0
// Barrier by dissemination: in round k every rank signals rank + 2^k and
// waits for rank - 2^k; after ceil(log2 n) rounds every rank has heard,
// directly or not, from every other. Each signal is a header alone, so the
// ranks also agree that they are all in the same barrier.
#include <vector>

#include "algorithms.h"

namespace loom_ucx {
namespace {

class BarrierDissemination : public Algorithm {
 public:
  explicit BarrierDissemination(loom_request &op) : n_(op.comm->size), r_(op.comm->rank) {
    for (int d = 1; d < n_; d *= 2) ++rounds_;
    sends_.resize(size_t(rounds_));
    recvs_.resize(size_t(rounds_));
    in_.resize(size_t(rounds_));
  }

  Step advance(loom_request &op) override {
    while (round_ < rounds_) {
      const int dist = 1 << round_, to = (r_ + dist) % n_, from = (r_ - dist % n_ + n_) % n_;
      Xfer &s = sends_[size_t(round_)], &r = recvs_[size_t(round_)];
      if (!r.posted) {
        recv_from(op, r, from, 0, &in_[size_t(round_)], sizeof(WireHeader));
        send_to(op, s, to, 0, &op.header, sizeof(WireHeader));
      }
      if (!r.done && !r.poll()) return Step::kRunning;
      if (!received_ok(op, r, from, sizeof(WireHeader)) || !header_ok(op, &in_[size_t(round_)], from))
        return Step::kRunning;
      ++round_;
    }
    for (int k = 0; k < rounds_; ++k) {
      Xfer &s = sends_[size_t(k)];
      if (!s.done && !s.poll()) return Step::kRunning;
      if (!sent_ok(op, s, (r_ + (1 << k)) % n_)) return Step::kRunning;
    }
    return Step::kDone;
  }

  bool sends_right() const override { return n_ > 1; }
  bool receives_left() const override { return n_ > 1; }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override {
    for (Xfer &x : sends_) fn(x);
    for (Xfer &x : recvs_) fn(x);
  }

 private:
  int n_, r_, rounds_ = 0, round_ = 0;
  std::vector<Xfer> sends_, recvs_;
  std::vector<WireHeader> in_;
};

}  // namespace

std::unique_ptr<Algorithm> make_barrier_dissemination(loom_request &op) {
  return std::make_unique<BarrierDissemination>(op);
}

}  // namespace loom_ucx
