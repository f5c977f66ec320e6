// SPDX-License-Identifier: Apache-2.0
// Reduce along a binomial tree towards root: every rank reduces what its
// children send into its own contribution and passes the partial up. Small
// payloads travel as one staged message (header + data) per edge; large ones
// are pipelined in chunks, chunk j going up as soon as every child's chunk j
// has arrived and been reduced. Only the root's recv is written: inner ranks
// keep their partial sums in scratch, leaves send straight from send.
#include <cstring>
#include <vector>

#include "algorithms.h"
#include "instance.h"
#include "reduce.h"

namespace loom_ucx {
namespace {

class ReduceBinomial : public Algorithm {
 public:
  ReduceBinomial(loom_request &op, bool pipelined)
      : tree_(op.comm->rank, op.comm->size, op.root), pipelined_(pipelined), count_(op.count), elem_(op.elem),
        bytes_(size_t(op.count) * op.elem), left_((op.comm->rank + op.comm->size - 1) % op.comm->size),
        right_((op.comm->rank + 1) % op.comm->size),
        chunks_(op.count, uint64_t(op.comm->ctx->tuning.chunk_bytes), op.elem), root_(op.comm->rank == op.root),
        nc_(size_t(tree_.num_children)) {
    const size_t staged = sizeof(WireHeader) + bytes_;
    if (!pipelined_) {
      buf_.resize(staged * (nc_ + 1));  // one slot per child, then this rank's outgoing message
      recvs_.resize(nc_);
      sends_.resize(1);
      char *out = buf_.data() + staged * nc_;
      std::memcpy(out, &op.header, sizeof(WireHeader));
      if (bytes_) std::memcpy(out + sizeof(WireHeader), op.send, bytes_);
      return;
    }
    depth_ = size_t(op.comm->ctx->tuning.pipeline_depth);
    recvs_.resize(depth_ * nc_);
    sends_.resize(depth_);
    hdr_in_.resize(nc_);
    hdr_in_buf_.resize(nc_);
    hdr_ok_.assign(nc_, false);
    const size_t chunk = size_t(chunks_.per) * elem_;
    // Child slots, then (inner ranks) partial sums.
    const size_t scratch = depth_ * chunk * (nc_ + (root_ || nc_ == 0 ? 0 : 1));
    if (scratch) {
      op.scratch = take_scratch(op.comm, scratch);
      slots_ = op.scratch->data();
      partials_ = slots_ + depth_ * chunk * nc_;
    }
  }

  Step advance(loom_request &op) override { return pipelined_ ? advance_pipelined(op) : advance_staged(op); }

  bool sends_right() const override { return tree_.parent >= 0 && tree_.parent == right_; }
  bool receives_left() const override {
    for (int i = 0; i < tree_.num_children; ++i)
      if (tree_.children[i] == left_) return true;
    return false;
  }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override {
    fn(hdr_out_);
    for (Xfer &x : hdr_in_) fn(x);
    for (Xfer &x : sends_) fn(x);
    for (Xfer &x : recvs_) fn(x);
  }

 private:
  Step advance_staged(loom_request &op) {
    const size_t staged = sizeof(WireHeader) + bytes_;
    char *mine = buf_.data() + staged * nc_ + sizeof(WireHeader);
    if (!started_) {
      for (size_t i = 0; i < nc_; ++i) recv_from(op, recvs_[i], tree_.children[i], 0, buf_.data() + staged * i, staged);
      started_ = true;
    }
    if (!reduced_) {
      for (size_t i = 0; i < nc_; ++i) {
        Xfer &x = recvs_[i];
        if (!x.done && !x.poll()) return Step::kRunning;
      }
      for (size_t i = 0; i < nc_; ++i) {
        const char *msg = buf_.data() + staged * i;
        if (!received_ok(op, recvs_[i], tree_.children[i], staged) || !header_ok(op, msg, tree_.children[i]))
          return Step::kRunning;
        reduce(op.dtype, op.reduce_op, mine, mine, msg + sizeof(WireHeader), count_);
      }
      reduced_ = true;
      if (root_) {
        if (op.reduce_op == LOOM_REDUCE_AVG) divide(mine, count_, op.dtype, op.comm->size);
        if (bytes_) std::memcpy(op.recv, mine, bytes_);
        return Step::kDone;
      }
      send_to(op, sends_[0], tree_.parent, 0, mine - sizeof(WireHeader), staged);
    }
    if (root_) return Step::kDone;
    if (!sends_[0].done && !sends_[0].poll()) return Step::kRunning;
    return sent_ok(op, sends_[0], tree_.parent) ? Step::kDone : Step::kRunning;
  }

  Step advance_pipelined(loom_request &op) {
    if (!started_) {
      if (!root_) send_to(op, hdr_out_, tree_.parent, 0, &op.header, sizeof(WireHeader));
      for (size_t i = 0; i < nc_; ++i)
        recv_from(op, hdr_in_[i], tree_.children[i], 0, &hdr_in_buf_[i], sizeof(WireHeader));
      started_ = true;
    }
    for (size_t i = 0; i < nc_; ++i) {
      if (hdr_ok_[i] || !hdr_in_[i].poll()) continue;
      if (!received_ok(op, hdr_in_[i], tree_.children[i], sizeof(WireHeader)) ||
          !header_ok(op, &hdr_in_buf_[i], tree_.children[i]))
        return Step::kRunning;
      hdr_ok_[i] = true;
    }
    bool headers = true;
    for (bool ok : hdr_ok_) headers = headers && ok;
    for (bool moved = true; moved;) {
      moved = false;
      while (send_done_ < sends_posted_) {
        Xfer &x = sends_[send_done_ % depth_];
        if (!x.done && !x.poll()) break;
        if (!sent_ok(op, x, tree_.parent)) return Step::kRunning;
        ++send_done_;
        moved = true;
      }
      while (nc_ && posted_ < chunks_.count && posted_ < processed_ + depth_) {
        const uint64_t j = posted_++;
        for (size_t i = 0; i < nc_; ++i)
          recv_from(op, recvs_[(j % depth_) * nc_ + i], tree_.children[i], uint32_t(1 + j), child_slot(j, i),
                    chunk_bytes(j));
        moved = true;
      }
      while (processed_ < chunks_.count && (nc_ == 0 || (headers && processed_ < posted_)) &&
             (root_ || processed_ < send_done_ + depth_)) {
        const uint64_t j = processed_;
        if (!chunk_arrived(op, j)) break;
        const char *partial = combine(op, j);
        if (!partial) return Step::kRunning;
        ++processed_;
        if (!root_) send_to(op, sends_[j % depth_], tree_.parent, uint32_t(1 + j), partial, chunk_bytes(j));
        if (!root_) ++sends_posted_;
        moved = true;
      }
    }
    if (!root_ && hdr_out_.pending() && !hdr_out_.poll()) return Step::kRunning;
    if (!root_ && !sent_ok(op, hdr_out_, tree_.parent)) return Step::kRunning;
    const bool done = headers && processed_ == chunks_.count && (root_ || send_done_ == chunks_.count);
    return done ? Step::kDone : Step::kRunning;
  }

  bool chunk_arrived(loom_request &op, uint64_t j) {
    for (size_t i = 0; i < nc_; ++i) {
      Xfer &x = recvs_[(j % depth_) * nc_ + i];
      if (!x.done && !x.poll()) return false;
    }
    for (size_t i = 0; i < nc_; ++i)
      if (!received_ok(op, recvs_[(j % depth_) * nc_ + i], tree_.children[i], chunk_bytes(j))) return false;
    return true;
  }

  // Reduces chunk j of this rank and its children; returns where it is
  // (what goes up, or the root's recv).
  const char *combine(loom_request &op, uint64_t j) {
    const size_t at = size_t(chunks_.begin(j, count_)) * elem_;
    const uint64_t len = chunks_.length(j, count_);
    const char *mine = static_cast<const char *>(op.send) + at;
    if (nc_ == 0) return mine;  // a leaf sends its own data
    char *out = root_ ? static_cast<char *>(op.recv) + at : partials_ + (j % depth_) * size_t(chunks_.per) * elem_;
    const char *a = mine;
    for (size_t i = 0; i < nc_; ++i, a = out) reduce(op.dtype, op.reduce_op, out, a, child_slot(j, i), len);
    if (root_ && op.reduce_op == LOOM_REDUCE_AVG) divide(out, len, op.dtype, op.comm->size);
    return out;
  }

  char *child_slot(uint64_t j, size_t i) { return slots_ + ((j % depth_) * nc_ + i) * size_t(chunks_.per) * elem_; }
  size_t chunk_bytes(uint64_t j) const { return size_t(chunks_.length(j, count_)) * elem_; }

  BinomialTree tree_;
  bool pipelined_;
  uint64_t count_;
  size_t elem_;
  size_t bytes_;
  int left_, right_;
  Chunks chunks_;
  bool root_;
  size_t nc_;
  size_t depth_ = 1;
  bool started_ = false, reduced_ = false;
  std::vector<char> buf_;  // staged messages
  char *slots_ = nullptr, *partials_ = nullptr;
  Xfer hdr_out_;
  std::vector<Xfer> hdr_in_, sends_, recvs_;
  std::vector<WireHeader> hdr_in_buf_;
  std::vector<bool> hdr_ok_;
  uint64_t posted_ = 0, processed_ = 0, sends_posted_ = 0, send_done_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_reduce_binomial(loom_request &op, bool pipelined) {
  return std::make_unique<ReduceBinomial>(op, pipelined);
}

}  // namespace loom_ucx
