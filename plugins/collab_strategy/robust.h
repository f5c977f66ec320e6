/* SPDX-License-Identifier: Apache-2.0 */
// CenteredClip (Karimireddy, He and Jaggi 2021; BTARD, Gorbunov et al. 2022):
// a robust mean of a group's copies of one slice of a vector, which a
// minority of members sending arbitrary values cannot drag far. Starting
// from the coordinate-wise median, each iteration moves the estimate v by
// the weighted mean of (x_i - v), each clipped to norm tau:
//
//   v <- v + sum_i w_i (x_i - v) min(1, tau / |x_i - v|) / sum_i w_i
//
// tau is radius x the median of the members' distances from the starting
// median, so it follows the gradients' scale as training goes on (a fixed
// tau is either no clip at all or a crawl). Pure functions, tested on their
// own; the round (averaging.cpp) moves the slices with alltoall and
// allgather.
#ifndef LOOM_COLLAB_ROBUST_H
#define LOOM_COLLAB_ROBUST_H

#include <cstdint>
#include <vector>

namespace loom_collab {

struct ClipStats {
  uint32_t clipped = 0;  // members clipped in the last iteration
};

// copies[i] points at member i's len values; weights[i] >= 0 (0: member i
// is left out: it diverged, or sent zeros; so is a copy holding a value
// that is not finite). out gets len values; it may not alias a copy. With
// no member left, out is all zeros.
ClipStats centered_clip(const std::vector<const float *> &copies, const std::vector<double> &weights, uint64_t len,
                        double radius, int iterations, float *out);

// The weights CenteredClip gives members that claim weights w: a member
// counts at most the (lower) median claim of those > 0, so one that claims a
// huge sample count gains no more pull than that.
std::vector<double> capped_weights(const std::vector<double> &w);

}  // namespace loom_collab

#endif
