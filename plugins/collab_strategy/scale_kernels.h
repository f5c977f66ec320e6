/* SPDX-License-Identifier: Apache-2.0 */
// The passes over a round's values besides the collective (averaging.cpp,
// state_averaging.cpp).
#ifndef LOOM_COLLAB_SCALE_KERNELS_H
#define LOOM_COLLAB_SCALE_KERNELS_H

#include <cstdint>

namespace loom_collab {

// out = in * k, and out = in / d: a round's passes over the gradients
// besides the allreduce (one with allreduce_scaled, two without). In fixed
// blocks, like plugins/common/average.h, because GCC's -O2 vectoriser takes
// only loops of a known trip count; the pointers never overlap (the round's
// buffer and the host's gradients).
inline constexpr uint64_t kScaleBlock = 16;
inline void scale_into(float *__restrict out, const float *__restrict in, uint64_t n, float k) {
  uint64_t i = 0;
  for (; i + kScaleBlock <= n; i += kScaleBlock)
    for (uint64_t j = 0; j < kScaleBlock; ++j) out[i + j] = in[i + j] * k;
  for (; i < n; ++i) out[i] = in[i] * k;
}
inline void divide_into(float *__restrict out, const float *__restrict in, uint64_t n, float d) {
  uint64_t i = 0;
  for (; i + kScaleBlock <= n; i += kScaleBlock)
    for (uint64_t j = 0; j < kScaleBlock; ++j) out[i + j] = in[i + j] / d;
  for (; i < n; ++i) out[i] = in[i] / d;
}

}  // namespace loom_collab

#endif
