// SPDX-License-Identifier: Apache-2.0
// Broadcast along a binomial tree rooted at root: log2(n) rounds for small
// payloads, sent as one staged message (header + data) per edge. Large
// payloads are pipelined: each rank forwards chunk j to its children as soon
// as it has arrived, straight from the caller's buffer, while chunk j+1 is
// still on its way.
#include <cstring>
#include <vector>

#include "algorithms.h"
#include "instance.h"

namespace loom_ucx {
namespace {

class BroadcastBinomial : public Algorithm {
 public:
  BroadcastBinomial(loom_request &op, bool pipelined)
      : tree_(op.comm->rank, op.comm->size, op.root), pipelined_(pipelined), count_(op.count), elem_(op.elem),
        bytes_(size_t(op.count) * op.elem), left_((op.comm->rank + op.comm->size - 1) % op.comm->size),
        right_((op.comm->rank + 1) % op.comm->size),
        chunks_(op.count, uint64_t(op.comm->ctx->tuning.chunk_bytes), op.elem), root_(op.comm->rank == op.root) {
    const size_t depth = size_t(op.comm->ctx->tuning.pipeline_depth);
    const size_t nc = size_t(tree_.num_children);
    if (root_ && op.send != op.recv && bytes_) std::memcpy(op.recv, op.send, bytes_);
    if (pipelined_) {
      recvs_.resize(depth);
      sends_.resize(2 * depth * nc);
      hdr_out_.resize(nc);
    } else {
      staged_.resize(sizeof(WireHeader) + bytes_);
      sends_.resize(nc);
      if (root_) {
        std::memcpy(staged_.data(), &op.header, sizeof(WireHeader));
        if (bytes_) std::memcpy(staged_.data() + sizeof(WireHeader), op.send, bytes_);
      }
    }
  }

  Step advance(loom_request &op) override { return pipelined_ ? advance_pipelined(op) : advance_staged(op); }

  bool sends_right() const override {
    for (int i = 0; i < tree_.num_children; ++i)
      if (tree_.children[i] == right_) return true;
    return false;
  }
  bool receives_left() const override { return tree_.parent >= 0 && tree_.parent == left_; }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override {
    fn(hdr_in_);
    fn(rx_);
    for (Xfer &x : hdr_out_) fn(x);
    for (Xfer &x : sends_) fn(x);
    for (Xfer &x : recvs_) fn(x);
  }


 private:
  Step advance_staged(loom_request &op) {
    if (!root_ && !got_) {
      if (!rx_.posted) recv_from(op, rx_, tree_.parent, 0, staged_.data(), staged_.size());
      if (!rx_.poll()) return Step::kRunning;
      if (!received_ok(op, rx_, tree_.parent, staged_.size()) || !header_ok(op, staged_.data(), tree_.parent))
        return Step::kRunning;
      if (bytes_) std::memcpy(op.recv, staged_.data() + sizeof(WireHeader), bytes_);
      got_ = true;
    }
    if (!forwarded_) {
      for (int i = 0; i < tree_.num_children; ++i)
        send_to(op, sends_[size_t(i)], tree_.children[i], 0, staged_.data(), staged_.size());
      forwarded_ = true;
    }
    for (int i = 0; i < tree_.num_children; ++i) {
      Xfer &x = sends_[size_t(i)];
      if (!x.done && !x.poll()) return Step::kRunning;
      if (!sent_ok(op, x, tree_.children[i])) return Step::kRunning;
    }
    return Step::kDone;
  }

  Step advance_pipelined(loom_request &op) {
    const size_t nc = size_t(tree_.num_children), depth = recvs_.size(), window = sends_.size() / (nc ? nc : 1);
    if (!started_) {
      for (size_t i = 0; i < nc; ++i) send_to(op, hdr_out_[i], tree_.children[i], 0, &op.header, sizeof(WireHeader));
      if (!root_) recv_from(op, hdr_in_, tree_.parent, 0, &hdr_in_buf_, sizeof hdr_in_buf_);
      received_ = root_ ? chunks_.count : 0;
      started_ = true;
    }
    if (!root_ && !hdr_ok_ && hdr_in_.poll()) {
      if (!received_ok(op, hdr_in_, tree_.parent, sizeof(WireHeader)) || !header_ok(op, &hdr_in_buf_, tree_.parent))
        return Step::kRunning;
      hdr_ok_ = true;
    }
    char *data = static_cast<char *>(op.recv);
    const char *source = root_ ? static_cast<const char *>(op.send) : data;
    for (bool moved = true; moved;) {
      moved = false;
      while (!root_ && posted_ < chunks_.count && posted_ < received_ + depth) {
        const uint64_t j = posted_++;
        recv_from(op, recvs_[j % depth], tree_.parent, uint32_t(1 + j), data + chunk_at(j),
                  chunk_bytes_of(j, op.elem));
        moved = true;
      }
      while (!root_ && hdr_ok_ && received_ < posted_) {
        Xfer &x = recvs_[received_ % depth];
        if (!x.done && !x.poll()) break;
        if (!received_ok(op, x, tree_.parent, chunk_bytes_of(received_, op.elem))) return Step::kRunning;
        ++received_;
        moved = true;
      }
      while (retired_ < forwarded_count_) {
        bool all = true;
        for (size_t i = 0; i < nc; ++i) {
          Xfer &x = sends_[(retired_ % window) * nc + i];
          if (!x.done && !x.poll()) {
            all = false;
            break;
          }
          if (!sent_ok(op, x, tree_.children[i])) return Step::kRunning;
        }
        if (!all) break;
        ++retired_;
        moved = true;
      }
      while (nc && forwarded_count_ < received_ && forwarded_count_ < retired_ + window) {
        const uint64_t j = forwarded_count_++;
        for (size_t i = 0; i < nc; ++i)
          send_to(op, sends_[(j % window) * nc + i], tree_.children[i], uint32_t(1 + j), source + chunk_at(j),
                  chunk_bytes_of(j, op.elem));
        moved = true;
      }
    }
    for (Xfer &x : hdr_out_)
      if (x.pending() && !x.poll()) return Step::kRunning;
    for (size_t i = 0; i < nc; ++i)
      if (!sent_ok(op, hdr_out_[i], tree_.children[i])) return Step::kRunning;
    const bool received_all = root_ || (hdr_ok_ && received_ == chunks_.count);
    const bool sent_all = nc == 0 || retired_ == chunks_.count;
    return received_all && sent_all ? Step::kDone : Step::kRunning;
  }

  size_t chunk_at(uint64_t j) const { return size_t(chunks_.begin(j, count_)) * elem_; }
  size_t chunk_bytes_of(uint64_t j, size_t) const { return size_t(chunks_.length(j, count_)) * elem_; }

  BinomialTree tree_;
  bool pipelined_;
  uint64_t count_;
  size_t elem_;
  size_t bytes_;
  int left_, right_;
  Chunks chunks_;
  bool root_;
  // staged
  std::vector<char> staged_;
  bool got_ = false, forwarded_ = false;
  Xfer rx_;
  // pipelined
  bool started_ = false, hdr_ok_ = false;
  Xfer hdr_in_;
  WireHeader hdr_in_buf_{};
  std::vector<Xfer> hdr_out_, sends_, recvs_;
  uint64_t posted_ = 0, received_ = 0, forwarded_count_ = 0, retired_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_broadcast_binomial(loom_request &op, bool pipelined) {
  return std::make_unique<BroadcastBinomial>(op, pipelined);
}

}  // namespace loom_ucx
