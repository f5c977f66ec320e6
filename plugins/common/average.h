/* SPDX-License-Identifier: Apache-2.0 */
// Turning a sum over `divisor` members into their average, in place: the one
// copy shared by the collectives (AVG is SUM, then this) and the DDP strategy
// (which sums and divides itself); and a scaled allreduce's multiplication
// (its argument rules are the SDK's: loom::cxx::check_scale).
// Header-only, so nothing is exported.
#ifndef LOOM_PLUGINS_COMMON_AVERAGE_H
#define LOOM_PLUGINS_COMMON_AVERAGE_H

#include <cmath>
#include <cstdint>

#include "half_float.h"
#include "loom/collective.h"

namespace loom_plugin_common {
namespace average_detail {

// In fixed blocks of 16: GCC's -O2 vectoriser (very cheap cost model) only
// takes loops of a known trip count; a plain loop stayed scalar divss (12 ms
// against 3.6 ms for 10.9 M floats). Each element is still one IEEE
// division, so results are exact, as a reciprocal multiply would not be.
template <class T>
inline void divide_float(T *p, uint64_t count, T d) {
  constexpr uint64_t kBlock = 16;
  uint64_t i = 0;
  for (; i + kBlock <= count; i += kBlock)
    for (uint64_t j = 0; j < kBlock; ++j) p[i + j] /= d;
  for (; i < count; ++i) p[i] /= d;
}

// In int64 so a divisor wider than T (300 ranks, u8) stays exact; the
// quotient truncates toward zero (C integer division).
template <class T>
inline void divide_int(T *p, uint64_t count, int divisor) {
  for (uint64_t i = 0; i < count; ++i) p[i] = T(int64_t(p[i]) / divisor);
}

// Through f32, rounded back to nearest-even.
template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
inline void divide_half(uint16_t *p, uint64_t count, int divisor) {
  const float d = float(divisor);
  for (uint64_t i = 0; i < count; ++i) p[i] = Store(Load(p[i]) / d);
}

// In fixed blocks, as divide_float, so the loop vectorises.
template <class T>
inline void scale_float(T *p, uint64_t count, T s) {
  constexpr uint64_t kBlock = 16;
  uint64_t i = 0;
  for (; i + kBlock <= count; i += kBlock)
    for (uint64_t j = 0; j < kBlock; ++j) p[i + j] *= s;
  for (; i < count; ++i) p[i] *= s;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
inline void scale_half(uint16_t *p, uint64_t count, float s) {
  for (uint64_t i = 0; i < count; ++i) p[i] = Store(Load(p[i]) * s);
}

}  // namespace average_detail

// buf[i] /= divisor for count elements of dtype; unknown dtypes are left alone.
inline void divide_in_place(void *buf, uint64_t count, loom_dtype dtype, int divisor) {
  using namespace average_detail;
  switch (dtype) {
    case LOOM_DTYPE_F16: divide_half<f16_to_float, float_to_f16>(static_cast<uint16_t *>(buf), count, divisor); break;
    case LOOM_DTYPE_BF16: divide_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t *>(buf), count, divisor); break;
    case LOOM_DTYPE_F32: divide_float(static_cast<float *>(buf), count, float(divisor)); break;
    case LOOM_DTYPE_F64: divide_float(static_cast<double *>(buf), count, double(divisor)); break;
    case LOOM_DTYPE_I8: divide_int(static_cast<int8_t *>(buf), count, divisor); break;
    case LOOM_DTYPE_U8: divide_int(static_cast<uint8_t *>(buf), count, divisor); break;
    case LOOM_DTYPE_I32: divide_int(static_cast<int32_t *>(buf), count, divisor); break;
    case LOOM_DTYPE_I64: divide_int(static_cast<int64_t *>(buf), count, divisor); break;
    default: break;
  }
}

// buf[i] *= s for count elements of a floating dtype (a scaled allreduce's
// final step): in f32 for f32 and the 16-bit floats, in f64 for f64. Other
// dtypes are left alone (the collectives refuse them before).
inline void scale_in_place(void *buf, uint64_t count, loom_dtype dtype, double s) {
  using namespace average_detail;
  switch (dtype) {
    case LOOM_DTYPE_F16: scale_half<f16_to_float, float_to_f16>(static_cast<uint16_t *>(buf), count, float(s)); break;
    case LOOM_DTYPE_BF16: scale_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t *>(buf), count, float(s)); break;
    case LOOM_DTYPE_F32: scale_float(static_cast<float *>(buf), count, float(s)); break;
    case LOOM_DTYPE_F64: scale_float(static_cast<double *>(buf), count, s); break;
    default: break;
  }
}

}  // namespace loom_plugin_common

#endif  // LOOM_PLUGINS_COMMON_AVERAGE_H
