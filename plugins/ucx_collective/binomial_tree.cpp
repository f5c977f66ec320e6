// SPDX-License-Identifier: Apache-2.0
// The binomial tree shared by broadcast and reduce (MPICH's numbering:
// relative rank v's parent clears v's lowest set bit).
#include "algorithms.h"

namespace loom_ucx {

BinomialTree::BinomialTree(int rank, int size, int root) {
  const int v = (rank - root + size) % size;
  int mask = 1;
  while (mask < size) {
    if (v & mask) {
      parent = (v - mask + root) % size;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < size) children[num_children++] = (v + mask + root) % size;
}

}  // namespace loom_ucx
