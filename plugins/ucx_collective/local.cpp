// SPDX-License-Identifier: Apache-2.0
// Operations that move nothing between ranks: every operation of a
// one-member communicator (copies within the caller's buffers), and any
// collective with count 0 (the ring-edge headers the operation adds still
// check that every rank posted the same thing).
#include <cstring>

#include "algorithms.h"
#include "reduce.h"

namespace loom_ucx {
namespace {

class Local : public Algorithm {
 public:
  Step advance(loom_request &) override { return Step::kDone; }
  bool sends_right() const override { return false; }
  bool receives_left() const override { return false; }
  void for_each_xfer(const std::function<void(Xfer &)> &) override {}
};

void copy(void *to, const void *from, size_t bytes) {
  if (bytes && to != from) std::memmove(to, from, bytes);
}

}  // namespace

std::unique_ptr<Algorithm> make_local(loom_request &op) {
  // With one member, the rank's own block is the whole result (AVG divides by 1).
  if (op.comm->size == 1 && op.header.op != kOpBarrier) {
    const size_t bytes = size_t(op.count) * op.elem;
    if (op.header.op != kOpReduce && op.header.op != kOpBroadcast) copy(op.recv, op.send, bytes);
    else if (op.comm->rank == op.root) copy(op.recv, op.send, bytes);
    if (op.reduce_op == kReduceScaledSum) scale(op.recv, size_t(op.count), op.dtype, op.scale);
  }
  return std::make_unique<Local>();
}

}  // namespace loom_ucx
