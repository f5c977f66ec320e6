/* SPDX-License-Identifier: Apache-2.0 */
// Local updates (DiLoCo, Douillard et al. 2023): each peer steps its own
// (inner) optimizer at every window, and once an epoch the swarm averages
// the pseudo-gradient, the parameters at the epoch's start (the anchor)
// minus where the peer got to. An outer optimizer, Nesterov momentum by
// default, applies that mean to the anchor; every member of the round then
// starts the next epoch from the same new anchor.
//
// The outer optimizer's state (anchor, momentum) belongs to the swarm, not
// to the host: it travels with a donor's snapshot as a trailer, so that a
// joiner starts from the anchor and the momentum, not from a donor's
// half-finished local steps.
#ifndef LOOM_COLLAB_OUTER_STEP_H
#define LOOM_COLLAB_OUTER_STEP_H

#include <cstdint>
#include <string>
#include <vector>

namespace loom_collab {

// One outer step, as torch.optim.SGD(nesterov=True) does it on the anchor
// with the mean pseudo-gradient g as its gradient:
//   m = g (first step), else m = mu m + g;   anchor -= lr (g + mu m).
// steps: outer steps taken before this one (0: m starts as g).
void nesterov_outer_step(float *anchor, float *momentum, const float *g, uint64_t n, float lr, float mu,
                         uint64_t steps);

// The outer state a donor appends to its host snapshot.
struct OuterState {
  uint64_t steps = 0;         // outer steps taken
  std::vector<float> anchor;  // the parameters at the current epoch's start
  std::vector<float> momentum;
};

// host bytes + anchor + momentum + a 40-byte footer (steps, numel, the host
// part's length, a magic); *out is resized.
void append_outer_state(const uint8_t *host, size_t host_len, const OuterState &s, std::vector<uint8_t> *out);
// Splits what append_outer_state made: *host_len gets the host part's
// length, *s the outer state. False, with *why, when the bytes end in no
// outer state, or in one for another number of parameters than numel.
bool split_outer_state(const uint8_t *data, size_t len, uint64_t numel, size_t *host_len, OuterState *s,
                       std::string *why);

}  // namespace loom_collab

#endif
