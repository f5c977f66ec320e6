/* SPDX-License-Identifier: Apache-2.0 */
// The algorithms, one file each (Gloo style), and the choice among them.
// Each factory builds the state machine for an operation whose arguments
// ops.cpp has checked; building may copy data (send into recv, packing) but
// never waits.
#ifndef LOOM_UCX_ALGORITHMS_H
#define LOOM_UCX_ALGORITHMS_H

#include <memory>

#include "op.h"

namespace loom_ucx {

// Size 1 (local copies) and count 0 (nothing to move; the operation's
// ring-edge headers still check the ranks agree).
std::unique_ptr<Algorithm> make_local(loom_request &op);

// Allreduce, latency-bound: log2(n) exchanges of the whole vector, each
// message carrying its header (non-powers of two fold the extra ranks in).
std::unique_ptr<Algorithm> make_allreduce_recursive_doubling(loom_request &op);
// Allreduce, bandwidth-bound: ring reduce-scatter then ring allgather,
// pipelined in chunks.
std::unique_ptr<Algorithm> make_allreduce_ring(loom_request &op);
std::unique_ptr<Algorithm> make_reduce_scatter_ring(loom_request &op);
std::unique_ptr<Algorithm> make_allgather_ring(loom_request &op);

// Binomial trees; `pipelined`: header first, then the payload in chunks
// straight from and into the caller's buffers; else one staged message.
std::unique_ptr<Algorithm> make_broadcast_binomial(loom_request &op, bool pipelined);
std::unique_ptr<Algorithm> make_reduce_binomial(loom_request &op, bool pipelined);

// Every pair at once; `direct`: header then the block in place, else one
// staged message per pair.
std::unique_ptr<Algorithm> make_alltoall_pairwise(loom_request &op, bool direct);

std::unique_ptr<Algorithm> make_barrier_dissemination(loom_request &op);

// Point to point: one message, matched by a per-pair sequence number.
std::unique_ptr<Algorithm> make_send(loom_request &op, int peer);
std::unique_ptr<Algorithm> make_recv(loom_request &op, int peer);

// The binomial tree rooted at `root`, in real ranks.
struct BinomialTree {
  int parent = -1;                // -1 at the root
  int children[16];  // largest subtree first (16 = log2 of kMaxRanks)
  int num_children = 0;
  BinomialTree(int rank, int size, int root);
};

// Chunking of n elements: chunk j covers [j * per, min((j+1) * per, n)).
struct Chunks {
  uint64_t per = 1;    // elements per chunk
  uint64_t count = 1;  // number of chunks (at least 1, the last may be short or empty)
  Chunks(uint64_t elements, uint64_t chunk_bytes, size_t elem)
      : per(chunk_bytes / elem > 0 ? chunk_bytes / elem : 1), count(elements > per ? (elements + per - 1) / per : 1) {}
  uint64_t begin(uint64_t j, uint64_t n) const { return j * per < n ? j * per : n; }
  uint64_t length(uint64_t j, uint64_t n) const {
    const uint64_t b = begin(j, n);
    return (n - b) < per ? n - b : per;
  }
};

}  // namespace loom_ucx

#endif  // LOOM_UCX_ALGORITHMS_H
