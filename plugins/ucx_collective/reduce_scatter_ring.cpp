// SPDX-License-Identifier: Apache-2.0
// Reduce-scatter: the reduce-scatter pass of the pipelined ring
// (ring_pipeline.h); block b is elements [b * recvcount, (b+1) * recvcount)
// of send, and rank r keeps block r. Partial sums of the blocks passing
// through live in scratch, so send is never written (in place, the rank's
// own block is, as the result).
#include "ring_pipeline.h"

namespace loom_ucx {

std::unique_ptr<Algorithm> make_reduce_scatter_ring(loom_request &op) {
  RingLayout lay;
  lay.mode = RingLayout::kReduceScatter;
  for (int b = 0; b < op.comm->size; ++b) {
    lay.offset.push_back(uint64_t(b) * op.count);
    lay.length.push_back(op.count);
  }
  lay.contrib = static_cast<const char *>(op.send);
  lay.final_out = static_cast<char *>(op.recv);
  return make_ring_pipeline(op, std::move(lay));
}

}  // namespace loom_ucx
