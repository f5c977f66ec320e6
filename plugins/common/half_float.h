/* SPDX-License-Identifier: Apache-2.0 */
// IEEE binary16 and bfloat16 <-> binary32 conversions, round to nearest even.
// Plain integer code: exact for every input, independent of compiler support
// for _Float16 / __bf16 and of F16C.
#ifndef LOOM_PLUGIN_COMMON_HALF_FLOAT_H
#define LOOM_PLUGIN_COMMON_HALF_FLOAT_H

#include <cstdint>
#include <cstring>

namespace loom_plugin_common {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf, NaN (payload kept)
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  const float sub = float(man) * 0x1p-24f;  // zero or subnormal: exact in binary32
  return sign ? -sub : sub;
}

inline uint16_t float_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN stays NaN, quiet
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (a >= 0x38800000u) {                                 // normal half (>= 2^-14)
    uint32_t r = a - (112u << 23);                        // rebias the exponent
    r += 0xfffu + ((r >> 13) & 1u);                       // round to nearest even at bit 13
    return uint16_t(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero (the tie goes to even)
  // Subnormal half: the significand with its implicit bit, shifted to units of 2^-24.
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (a >> 23);  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // may carry into the smallest normal
  return uint16_t(sign | h);
}

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into infinity
  return uint16_t(x >> 16);
}

}  // namespace loom_plugin_common

#endif  // LOOM_PLUGIN_COMMON_HALF_FLOAT_H
