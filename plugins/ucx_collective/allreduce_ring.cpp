// SPDX-License-Identifier: Apache-2.0
// Allreduce for large messages: ring reduce-scatter then ring allgather
// (ring_pipeline.h), each 2(n-1)/n of the vector per rank, the bandwidth
// optimum. Blocks are balanced to within one element; the final block of
// each rank is divided for AVG before it is passed on, so the division is
// done once per element across the group.
#include "ring_pipeline.h"

namespace loom_ucx {

std::unique_ptr<Algorithm> make_allreduce_ring(loom_request &op) {
  const int n = op.comm->size;
  RingLayout lay;
  lay.mode = RingLayout::kAllreduce;
  const uint64_t q = op.count / uint64_t(n), extra = op.count % uint64_t(n);
  for (int b = 0; b < n; ++b) {
    const uint64_t ub = uint64_t(b);
    lay.offset.push_back(ub * q + (ub < extra ? ub : extra));
    lay.length.push_back(q + (ub < extra ? 1 : 0));
  }
  lay.contrib = static_cast<const char *>(op.send);
  lay.full = static_cast<char *>(op.recv);
  return make_ring_pipeline(op, std::move(lay));
}

}  // namespace loom_ucx
