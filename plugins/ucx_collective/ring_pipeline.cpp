// SPDX-License-Identifier: Apache-2.0
// The pipelined ring (see ring_pipeline.h). Units are (step, chunk) pairs in
// step-major order; both neighbours number them alike, and unit u travels as
// message 1 + u (message 0 is the header).
//
// Blocks, all modulo n: reduce-scatter step s sends block r-s-1 and receives
// block r-s-2 (so rank r ends owning block r); allgather step t sends block
// r-t and receives block r-t-1.
//
// Whole blocks: when every member shares the host (cross-memory attach
// between all pairs) and every block is large enough to go that way, each
// step is one message of the whole block (a descriptor: the data stays in
// the sender's memory) and the receiver moves it all itself. A reduce-scatter
// receive reads the block in chunk_bytes pieces into one cache-resident
// scratch and reduces each piece into place at once (a CmaSink), so the data
// crosses memory once, and an allgather receive reads straight into place.
// Chunking the messages would only add round trips there: the receiver's
// core does the copying either way, so nothing is left to overlap, and with
// one descriptor per block a rank reads its neighbour's data even while the
// neighbour is not scheduled (the machines here are shared and loaded: with
// 256 KiB messages a rank stalls whenever its neighbour is descheduled with
// its next descriptors unsent). Only reads cross processes, never writes: a
// rank that aborts and frees its buffers can at worst make a peer's read
// fail (EFAULT: "left the operation"), never have its memory written.
#include "ring_pipeline.h"

#include <cerrno>
#include <cstring>

#include "cma.h"
#include "instance.h"
#include "reduce.h"

namespace loom_ucx {
namespace {

class RingPipeline : public Algorithm {
 public:
  RingPipeline(loom_request &op, RingLayout layout)
      : lay_(std::move(layout)), op_(&op), n_(op.comm->size), r_(op.comm->rank), left_((r_ + n_ - 1) % n_),
        right_((r_ + 1) % n_), elem_(op.elem) {
    const Tuning &t = op.comm->ctx->tuning;
    uint64_t longest = 0, shortest = ~uint64_t(0);
    for (uint64_t len : lay_.length) {
      longest = len > longest ? len : longest;
      shortest = len < shortest ? len : shortest;
    }
    // Every rank decides alike: same layout, options and identities.
    whole_ = t.cma_whole_blocks && op.comm->cma_everywhere && t.cma_threshold >= 0 && shortest > 0 &&
             shortest * elem_ >= uint64_t(t.cma_threshold);
    // The header shows the choice, so ranks with cma_whole_blocks set
    // differently fail with "different algorithm options", not a length.
    if (whole_) op.header.chunk_bytes = 0;
    piece_ = uint64_t(t.chunk_bytes) / elem_ > 0 ? uint64_t(t.chunk_bytes) / elem_ : 1;
    const Chunks chunks(longest, whole_ ? longest * elem_ : uint64_t(t.chunk_bytes), elem_);
    per_ = chunks.per;
    k_ = chunks.count;
    rs_ = lay_.mode == RingLayout::kAllgather ? 0 : n_ - 1;
    ag_ = lay_.mode == RingLayout::kReduceScatter ? 0 : n_ - 1;
    total_ = uint64_t(rs_ + ag_) * k_;
    depth_ = size_t(t.pipeline_depth);
    // Partial sums of a vector much larger than the caches are only read
    // again by the transport, later: write them around the cache.
    stream_ = uint64_t(op.count) * elem_ >= kStreamBytes;
    recvs_.resize(depth_);
    sends_.resize(2 * depth_);
    if (whole_) sinks_.assign(depth_, Sink(this));
    const size_t slots = rs_ ? (whole_ ? piece_ : depth_ * per_) * elem_ : 0;
    size_t scratch = slots;
    if (lay_.mode == RingLayout::kReduceScatter) scratch += 2 * longest * elem_;  // partial sums, two steps
    if (scratch) {
      op.scratch = take_scratch(op.comm, scratch);
      slots_ = op.scratch->data();
      partial_ = slots_ + slots;
      partial_block_ = longest * elem_;
    }
  }

  Step advance(loom_request &op) override {
    if (!started_) {
      send_to(op, hdr_out_, right_, 0, &op.header, sizeof(WireHeader));
      recv_from(op, hdr_in_, left_, 0, &hdr_in_buf_, sizeof hdr_in_buf_);
      started_ = true;
    }
    if (!hdr_ok_ && hdr_in_.poll()) {
      if (!received_ok(op, hdr_in_, left_, sizeof(WireHeader)) || !header_ok(op, &hdr_in_buf_, left_))
        return Step::kRunning;
      hdr_ok_ = true;
    }
    if (hdr_out_.pending() && hdr_out_.poll() && !sent_ok(op, hdr_out_, right_)) return Step::kRunning;
    for (bool moved = true; moved;) {
      moved = false;
      while (send_done_ < sends_posted_) {  // retire sends in order
        Xfer &x = sends_[send_done_ % sends_.size()];
        if (!x.done && !x.poll()) break;
        if (!sent_ok(op, x, right_)) return Step::kRunning;
        ++send_done_;
        moved = true;
      }
      while (recvs_posted_ < total_ && recvs_posted_ < processed_ + depth_ && recv_allowed(recvs_posted_)) {
        const uint64_t u = recvs_posted_++;
        recv_from(op, recvs_[u % depth_], left_, uint32_t(1 + u), recv_ptr(u), bytes_of(recv_block(u), u));
        if (whole_) {
          sinks_[u % depth_].unit = u;
          recvs_[u % depth_].sink = &sinks_[u % depth_];
        }
        moved = true;
      }
      while (hdr_ok_ && processed_ < recvs_posted_ && process_allowed(processed_)) {
        Xfer &x = recvs_[processed_ % depth_];
        if (!x.done && !x.poll()) break;
        if (!received_ok(op, x, left_, bytes_of(recv_block(processed_), processed_))) return Step::kRunning;
        process(op, processed_++);
        moved = true;
      }
      while (sends_posted_ < total_ && sends_posted_ < send_done_ + sends_.size() && send_ready(sends_posted_)) {
        const uint64_t u = sends_posted_++;
        send_to(op, sends_[u % sends_.size()], right_, uint32_t(1 + u), send_ptr(u), bytes_of(send_block(u), u));
        moved = true;
      }
    }
    const bool done = processed_ == total_ && send_done_ == total_ && hdr_ok_ && hdr_out_.done;
    return done ? Step::kDone : Step::kRunning;
  }

  bool sends_right() const override { return true; }
  bool receives_left() const override { return true; }
  void for_each_xfer(const std::function<void(Xfer &)> &fn) override {
    fn(hdr_out_);
    fn(hdr_in_);
    for (Xfer &x : sends_) fn(x);
    for (Xfer &x : recvs_) fn(x);
  }

 private:
  // Takes a whole-block message for unit `unit` (see the top of the file).
  class Sink : public CmaSink {
   public:
    explicit Sink(RingPipeline *ring) : ring_(ring) {}
    int consume(pid_t sender, uint64_t address, uint64_t length) override {
      return ring_->consume(unit, sender, address, length);
    }
    uint64_t unit = 0;

   private:
    RingPipeline *ring_;
  };

  // Between pieces the abort flag is read, so a long read ends soon after
  // another thread aborts (the wait that runs it holds the instance lock).
  int consume(uint64_t u, pid_t sender, uint64_t address, uint64_t length) {
    const int b = recv_block(u);
    if (!is_rs(u)) {
      char *to = lay_.full + chunk_offset(b, u);
      for (uint64_t off = 0; off < length; off += kCopyPiece) {
        if (op_->comm->aborted.load(std::memory_order_relaxed)) return ECANCELED;
        const uint64_t len = length - off < kCopyPiece ? length - off : kCopyPiece;
        if (const int err = cma_read(sender, address + off, to + off, len)) return err;
      }
      return 0;
    }
    const int s = step_of(u);
    char *out = partial_ptr(s, b, u);
    const char *mine = lay_.contrib + chunk_offset(b, u);
    // AVG divides each piece while it is in the cache; the sums then stay
    // cached (no streaming stores) for that division.
    const bool divide_here = s == rs_ - 1 && finishes_block(op_->reduce_op);
    const uint64_t piece = piece_ * elem_;
    for (uint64_t off = 0; off < length; off += piece) {
      if (op_->comm->aborted.load(std::memory_order_relaxed)) return ECANCELED;
      const uint64_t len = length - off < piece ? length - off : piece;
      if (const int err = cma_read(sender, address + off, slots_, len)) return err;
      // A length that is no multiple of the element (other arguments on the
      // sender) fails the operation afterwards; reduce the whole elements.
      const size_t count = size_t(len / elem_);
      reduce(op_->dtype, op_->reduce_op, out + off, mine + off, slots_, count, stream_ && !divide_here);
      if (divide_here) finish_block(op_->reduce_op, op_->scale, n_, out + off, count, op_->dtype);
    }
    return 0;
  }

  int mod(int64_t b) const { return int(((b % n_) + n_) % n_); }
  int step_of(uint64_t u) const { return int(u / k_); }
  uint64_t chunk_of(uint64_t u) const { return u % k_; }
  bool is_rs(uint64_t u) const { return step_of(u) < rs_; }
  int send_block(uint64_t u) const {
    const int s = step_of(u);
    return is_rs(u) ? mod(int64_t(r_) - s - 1) : mod(int64_t(r_) - (s - rs_));
  }
  int recv_block(uint64_t u) const {
    const int s = step_of(u);
    return is_rs(u) ? mod(int64_t(r_) - s - 2) : mod(int64_t(r_) - (s - rs_) - 1);
  }
  size_t bytes_of(int block, uint64_t u) const { return size_t(chunk_len(block, u)) * elem_; }
  uint64_t chunk_len(int block, uint64_t u) const {
    const uint64_t len = lay_.length[size_t(block)], b = chunk_of(u) * per_;
    return b >= len ? 0 : (len - b < per_ ? len - b : per_);
  }
  size_t chunk_offset(int block, uint64_t u) const {
    const uint64_t b = chunk_of(u) * per_, len = lay_.length[size_t(block)];
    return size_t(lay_.offset[size_t(block)] + (b < len ? b : len)) * elem_;
  }
  // Where reduce-scatter step s keeps its partial sum of `block`.
  char *partial_ptr(int s, int block, uint64_t u) {
    if (lay_.mode == RingLayout::kAllreduce) return lay_.full + chunk_offset(block, u);
    const uint64_t b = chunk_of(u) * per_, len = lay_.length[size_t(block)];
    const size_t within = size_t(b < len ? b : len) * elem_;
    if (s == rs_ - 1) return lay_.final_out + within;
    return partial_ + size_t(s % 2) * partial_block_ + within;
  }
  const char *send_ptr(uint64_t u) {
    const int b = send_block(u), s = step_of(u);
    if (!is_rs(u)) return lay_.full + chunk_offset(b, u);
    if (s == 0) return lay_.contrib + chunk_offset(b, u);
    return partial_ptr(s - 1, b, u);
  }
  char *recv_ptr(uint64_t u) {
    if (is_rs(u)) return whole_ ? nullptr : slots_ + (u % depth_) * per_ * elem_;  // whole: the sink reads
    return lay_.full + chunk_offset(recv_block(u), u);
  }
  // Unit u forwards what unit u - k arrived with.
  bool send_ready(uint64_t u) const { return u < k_ || processed_ > u - k_; }
  // An allgather receive overwrites the block that the reduce-scatter step of
  // the same index sent from: that send must be over.
  // Whole blocks: the sink writes as soon as the data is there, so a receive
  // is posted only once the left neighbour's header has been checked (no
  // data of a sender is used before) and, in reduce_scatter, once its
  // partial-sum slot is free (process_allowed).
  bool recv_allowed(uint64_t u) const {
    if (whole_ && (!hdr_ok_ || (is_rs(u) && !process_allowed(u)))) return false;
    if (lay_.mode != RingLayout::kAllreduce || is_rs(u)) return true;
    return send_done_ > u - uint64_t(rs_) * k_;
  }
  // reduce_scatter keeps two steps of partial sums: step s reuses step s-2's
  // slot once step s-1 has sent it.
  bool process_allowed(uint64_t u) const {
    const int s = step_of(u);
    if (lay_.mode != RingLayout::kReduceScatter || s < 2 || s == rs_ - 1) return true;
    return send_done_ > u - k_;
  }
  void process(loom_request &op, uint64_t u) {
    if (!is_rs(u) || whole_) return;  // allgather data landed in place; whole blocks were reduced by the sink
    const int b = recv_block(u), s = step_of(u);
    const uint64_t len = chunk_len(b, u);
    char *out = partial_ptr(s, b, u);
    reduce(op.dtype, op.reduce_op, out, lay_.contrib + chunk_offset(b, u), recv_ptr(u), len, stream_);
    if (s == rs_ - 1 && finishes_block(op.reduce_op)) finish_block(op.reduce_op, op.scale, n_, out, len, op.dtype);
  }

  RingLayout lay_;
  loom_request *op_;  // the operation that owns this algorithm
  int n_, r_, left_, right_;
  size_t elem_;
  uint64_t per_ = 1, k_ = 1, total_ = 0;
  int rs_ = 0, ag_ = 0;
  size_t depth_ = 1;
  bool stream_ = false;
  bool whole_ = false;  // whole-block messages by cross-memory attach
  uint64_t piece_ = 1;  // elements per fused read and reduction
  static constexpr uint64_t kCopyPiece = uint64_t(4) << 20;
  std::vector<Sink> sinks_;  // one per receive slot (whole blocks)
  static constexpr uint64_t kStreamBytes = uint64_t(16) << 20;
  char *slots_ = nullptr, *partial_ = nullptr;
  size_t partial_block_ = 0;
  std::vector<Xfer> sends_, recvs_;
  uint64_t sends_posted_ = 0, send_done_ = 0, recvs_posted_ = 0, processed_ = 0;
  bool started_ = false, hdr_ok_ = false;
  Xfer hdr_out_, hdr_in_;
  WireHeader hdr_in_buf_{};
};

}  // namespace

std::unique_ptr<Algorithm> make_ring_pipeline(loom_request &op, RingLayout layout) {
  return std::make_unique<RingPipeline>(op, std::move(layout));
}

}  // namespace loom_ucx
