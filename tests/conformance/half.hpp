// SPDX-License-Identifier: Apache-2.0
// half.hpp: float <-> binary16 and bfloat16 conversions for the conformance
// suite, rounding to nearest even (no LibTorch, no compiler extensions).
//
// The suite only stores values that are exact in every dtype, so rounding
// never decides a test; it is still correct so that a failure message shows
// the true nearest value.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace conformance {

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// IEEE 754 binary16 from binary32, round to nearest even; NaN stays NaN.
inline uint16_t float_to_f16(float value) {
  const uint32_t x = float_bits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  const uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  const int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (e <= 0) {                                                // subnormal or zero
    if (e < -10) return static_cast<uint16_t>(sign);           // below half the smallest subnormal
    const uint32_t full = mant | 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);      // 14..24
    uint32_t q = full >> shift;
    const uint32_t rem = full & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;          // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;      // a carry may reach infinity: correct
  return static_cast<uint16_t>(sign | h);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// bfloat16 (the top half of a binary32), round to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float value) {
  const uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

}  // namespace conformance
