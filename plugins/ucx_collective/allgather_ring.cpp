// SPDX-License-Identifier: Apache-2.0
// Allgather: the allgather pass of the pipelined ring (ring_pipeline.h),
// every block received straight into its place in recv. Out of place, the
// rank's own block is copied into recv first.
#include <cstring>

#include "ring_pipeline.h"

namespace loom_ucx {

std::unique_ptr<Algorithm> make_allgather_ring(loom_request &op) {
  RingLayout lay;
  lay.mode = RingLayout::kAllgather;
  for (int b = 0; b < op.comm->size; ++b) {
    lay.offset.push_back(uint64_t(b) * op.count);
    lay.length.push_back(op.count);
  }
  lay.full = static_cast<char *>(op.recv);
  char *own = lay.full + size_t(op.comm->rank) * size_t(op.count) * op.elem;
  if (op.send != own) std::memcpy(own, op.send, size_t(op.count) * op.elem);
  return make_ring_pipeline(op, std::move(lay));
}

}  // namespace loom_ucx
