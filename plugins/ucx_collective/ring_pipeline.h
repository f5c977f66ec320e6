/* SPDX-License-Identifier: Apache-2.0 */
// The pipelined ring shared by allreduce_ring, reduce_scatter_ring and
// allgather_ring. The vector is cut into n blocks; a reduce-scatter pass of
// n-1 steps leaves rank r with the full reduction of block r, an allgather
// pass of n-1 steps hands every block around. Every step moves one block to
// the right neighbour in chunks, and chunk j of a step is sent as soon as
// chunk j of the step before has arrived (and been reduced), so transfers,
// reductions and the next chunk's transfer overlap. At most `depth` chunks
// per link are in flight; reduce-scatter receives land in that many scratch
// slots, allgather receives land straight in the caller's buffer.
#ifndef LOOM_UCX_RING_PIPELINE_H
#define LOOM_UCX_RING_PIPELINE_H

#include <vector>

#include "algorithms.h"

namespace loom_ucx {

struct RingLayout {
  enum Mode { kAllreduce, kReduceScatter, kAllgather } mode;
  std::vector<uint64_t> offset, length;  // block b: elements [offset[b], offset[b] + length[b])
  const char *contrib = nullptr;  // this rank's input, in block coordinates (reduce-scatter)
  char *full = nullptr;           // the whole result vector (allreduce, allgather)
  char *final_out = nullptr;      // reduce_scatter: where this rank's block goes
};

std::unique_ptr<Algorithm> make_ring_pipeline(loom_request &op, RingLayout layout);

}  // namespace loom_ucx

#endif  // LOOM_UCX_RING_PIPELINE_H
