// SPDX-License-Identifier: Apache-2.0
#include "compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common/half_float.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loom_collab {

using loom_plugin_common::bf16_to_float;
using loom_plugin_common::f16_to_float;
using loom_plugin_common::float_to_bf16;
using loom_plugin_common::float_to_f16;

namespace {

constexpr float kF16Max = 65504.0f;

uint64_t blocks_of(uint64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

#if defined(__x86_64__)
// binary16 by the F16C instructions, 8 values at a time, where the CPU has
// them (checked once at run time; the build targets baseline x86-64). The
// same rounding as float_to_f16 (to nearest even, subnormals kept), so
// members with and without F16C encode alike; NaN payloads may differ, and
// no counted member sends NaN.
__attribute__((target("avx,f16c"))) uint64_t encode_f16c(const float *in, uint64_t n, uint8_t *out) {
  uint64_t clamped = 0, i = 0;
  const __m256 hi = _mm256_set1_ps(kF16Max), lo = _mm256_set1_ps(-kF16Max);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    const __m256 c = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
    const int beyond = _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(x, hi, _CMP_GT_OQ), _mm256_cmp_ps(x, lo, _CMP_LT_OQ)));
    clamped += uint64_t(__builtin_popcount(unsigned(beyond)));
    // A NaN lane keeps x (blend by the unordered compare), so NaN stays NaN.
    const __m256 v = _mm256_blendv_ps(c, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    float x = in[i];
    if (x > kF16Max || x < -kF16Max) {
      x = x > 0 ? kF16Max : -kF16Max;
      ++clamped;
    }
    const uint16_t h = float_to_f16(x);
    std::memcpy(out + 2 * i, &h, 2);
  }
  return clamped;
}

__attribute__((target("avx,f16c"))) void decode_f16c(const uint8_t *in, uint64_t n, float *out) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(in + 2 * i))));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = f16_to_float(h);
  }
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}
#else
bool has_f16c() { return false; }
uint64_t encode_f16c(const float *, uint64_t, uint8_t *) { return 0; }
void decode_f16c(const uint8_t *, uint64_t, float *) {}
#endif

uint64_t encode_halves(const float *in, uint64_t n, uint8_t *out, bool f16) {
  if (f16 && has_f16c()) return encode_f16c(in, n, out);
  uint64_t clamped = 0;
  for (uint64_t i = 0; i < n; ++i) {
    float x = in[i];
    uint16_t h;
    if (f16) {
      if (x > kF16Max || x < -kF16Max) {
        x = x > 0 ? kF16Max : -kF16Max;
        ++clamped;
      }
      h = float_to_f16(x);
    } else {
      h = float_to_bf16(x);
      if ((h & 0x7fffu) == 0x7f80u) h = uint16_t((h & 0x8000u) | 0x7f7fu);  // rounded past the largest finite
    }
    std::memcpy(out + 2 * i, &h, 2);  // little-endian hosts only, as the whole wire (DESIGN.md)
  }
  return clamped;
}

// Round to nearest even for |v| < 2^22 without a libm call: adding and
// subtracting 1.5 x 2^23 leaves the integer part (default rounding mode; the
// build has no -ffast-math to fold it away). |v| <= 127 here.
inline float round_even(float v) { return (v + 12582912.0f) - 12582912.0f; }

// One block: its scale, then its codes. Full blocks take the fixed-length
// loops GCC's -O2 vectoriser accepts.
template <uint64_t kLen>
void quantize_block(const float *__restrict in, int8_t *__restrict codes, float *scale_out, uint64_t len) {
  const uint64_t n = kLen ? kLen : len;
  float absmax = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const float a = std::fabs(in[i]);
    absmax = a > absmax ? a : absmax;
  }
  const float scale = absmax / 127.0f;
  *scale_out = scale;
  if (scale == 0 || !std::isfinite(scale)) {  // all zeros (a non-finite block is the caller's to refuse)
    for (uint64_t i = 0; i < n; ++i) codes[i] = 0;
    return;
  }
  const float inv = 1.0f / scale;
  for (uint64_t i = 0; i < n; ++i) {
    float q = round_even(in[i] * inv);
    q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
    codes[i] = int8_t(q);
  }
}

template <uint64_t kLen>
void dequantize_block(const int8_t *__restrict codes, float scale, float *__restrict out, uint64_t len) {
  const uint64_t n = kLen ? kLen : len;
  for (uint64_t i = 0; i < n; ++i) out[i] = float(codes[i]) * scale;
}

void encode_blockwise(const float *in, uint64_t n, uint8_t *out) {
  const uint64_t blocks = blocks_of(n);
  auto *codes = reinterpret_cast<int8_t *>(out + 4 * blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t begin = b * kQuantBlock, len = std::min(n - begin, kQuantBlock);
    float scale;
    if (len == kQuantBlock) quantize_block<kQuantBlock>(in + begin, codes + begin, &scale, len);
    else quantize_block<0>(in + begin, codes + begin, &scale, len);
    std::memcpy(out + 4 * b, &scale, 4);
  }
}

void decode_blockwise(const uint8_t *in, uint64_t n, float *out) {
  const uint64_t blocks = blocks_of(n);
  const auto *codes = reinterpret_cast<const int8_t *>(in + 4 * blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, in + 4 * b, 4);
    const uint64_t begin = b * kQuantBlock, len = std::min(n - begin, kQuantBlock);
    if (len == kQuantBlock) dequantize_block<kQuantBlock>(codes + begin, scale, out + begin, len);
    else dequantize_block<0>(codes + begin, scale, out + begin, len);
  }
}

}  // namespace

bool parse_codec(const std::string &name, Codec *out) {
  for (Codec c : {Codec::none, Codec::fp16, Codec::bf16, Codec::blockwise8})
    if (name == codec_name(c)) {
      *out = c;
      return true;
    }
  return false;
}

const char *codec_name(Codec c) {
  switch (c) {
    case Codec::fp16: return "fp16";
    case Codec::bf16: return "bf16";
    case Codec::blockwise8: return "blockwise8";
    default: return "none";
  }
}

uint64_t encoded_bytes(Codec c, uint64_t n) {
  switch (c) {
    case Codec::fp16:
    case Codec::bf16: return 2 * n;
    case Codec::blockwise8: return 4 * blocks_of(n) + n;
    default: return 4 * n;
  }
}

uint64_t encode(Codec c, const float *in, uint64_t n, uint8_t *out) {
  switch (c) {
    case Codec::fp16: return encode_halves(in, n, out, true);
    case Codec::bf16: return encode_halves(in, n, out, false);
    case Codec::blockwise8: encode_blockwise(in, n, out); return 0;
    default: std::memcpy(out, in, 4 * n); return 0;
  }
}

void decode(Codec c, const uint8_t *in, uint64_t n, float *out) {
  switch (c) {
    case Codec::fp16:
      if (has_f16c()) return decode_f16c(in, n, out);
      [[fallthrough]];
    case Codec::bf16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = c == Codec::fp16 ? f16_to_float(h) : bf16_to_float(h);
      }
      return;
    case Codec::blockwise8: decode_blockwise(in, n, out); return;
    default: std::memcpy(out, in, 4 * n); return;
  }
}

double codec_error_bound(Codec c, double x, double block_absmax) {
  const double a = std::fabs(x);
  switch (c) {
    case Codec::fp16: return a > kF16Max ? a - kF16Max : std::max(a * 0x1p-11, 0x1p-25);
    case Codec::bf16: return std::max(a * 0x1p-8, 0x1p-134);
    // The scale is rounded to f32 and so is x / scale: a few ulps of absmax more.
    case Codec::blockwise8: return block_absmax / 254.0 * (1 + 0x1p-20);
    default: return 0;
  }
}

SliceLayout::SliceLayout(Codec c, uint64_t n, uint64_t m)
    : numel(n), members(m), chunk(m ? (n + m - 1) / m : 0), slice_bytes(encoded_bytes(c, chunk)) {}

uint64_t encode_slices(Codec c, const SliceLayout &l, const float *values, uint8_t *out) {
  std::vector<float> padded;  // only for a slice the vector ends in
  uint64_t clamped = 0;
  for (uint64_t j = 0; j < l.members; ++j) {
    const uint64_t begin = std::min(l.numel, j * l.chunk), len = std::min(l.numel, begin + l.chunk) - begin;
    const float *slice = values + begin;
    if (len < l.chunk) {  // the last slices: padded with zeros
      padded.assign(l.chunk, 0.0f);
      std::copy(values + begin, values + begin + len, padded.begin());
      slice = padded.data();
    }
    clamped += encode(c, slice, l.chunk, out + j * l.slice_bytes);
  }
  return clamped;
}

void decode_copies(Codec c, const SliceLayout &l, const uint8_t *received, float *copies) {
  for (uint64_t j = 0; j < l.members; ++j) decode(c, received + j * l.slice_bytes, l.chunk, copies + j * l.chunk);
}

void weighted_mean(const std::vector<const float *> &copies, const std::vector<double> &weights, uint64_t len,
                   float *out) {
  std::fill(out, out + len, 0.0f);
  double total = 0;
  for (size_t j = 0; j < copies.size(); ++j) {
    if (!(weights[j] > 0)) continue;
    total += weights[j];
    const float w = float(weights[j]);
    const float *x = copies[j];
    for (uint64_t i = 0; i < len; ++i) out[i] += w * x[i];
  }
  if (!(total > 0)) return;
  const float inv = float(1.0 / total);
  for (uint64_t i = 0; i < len; ++i) out[i] *= inv;
}

void decode_gathered(Codec c, const SliceLayout &l, const uint8_t *gathered, float *out) {
  std::vector<float> slice;  // only for the slice the vector ends in
  for (uint64_t j = 0; j < l.members; ++j) {
    const uint64_t begin = std::min(l.numel, j * l.chunk), len = std::min(l.numel, begin + l.chunk) - begin;
    if (len == 0) break;
    if (len == l.chunk) {
      decode(c, gathered + j * l.slice_bytes, l.chunk, out + begin);
    } else {
      slice.resize(l.chunk);
      decode(c, gathered + j * l.slice_bytes, l.chunk, slice.data());
      std::copy(slice.begin(), slice.begin() + len, out + begin);
    }
  }
}

}  // namespace loom_collab
