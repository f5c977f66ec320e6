/* SPDX-License-Identifier: Apache-2.0 */
// Compression on the wire (options compression and state_compression): the
// codecs a group's averaging sends its values in, and the steps of a
// compressed mean. Pure functions, tested on their own
// (tests/collab/compression_test.cpp); the round (sliced_round.cpp) moves
// the bytes with alltoall and allgather.
//
// A compressed mean is a butterfly, as hivemind's: member r owns slice r of
// the vector. Each member encodes every slice of its values and sends slice
// j to member j (alltoall); the owner decodes the copies of its slice, sums
// them weighted, in f32, and encodes the mean once; every member gathers
// the encoded means (allgather) and decodes them. So every member ends with
// the same bits, its own slice included, and a value is rounded twice: once
// in each member's copy, once in the mean. Bytes sent per member and round:
// 2 (n - 1) / n of the encoded vector, as a ring allreduce of it.
//
// The codecs and their error per value x (the bound compression_test checks):
//   none        4 bytes a value, exact.
//   fp16        2 bytes, IEEE binary16, round to nearest even: |error| <=
//               |x| 2^-11, or 2^-25 below binary16's normal range (2^-14).
//               Values beyond +-65504 are clamped there (and counted).
//   bf16        2 bytes, bfloat16 (binary32's top half), round to nearest
//               even: |error| <= |x| 2^-8 (2^-134 among binary32's
//               subnormals). Its range is binary32's.
//   blockwise8  about 1 byte: blocks of kQuantBlock values share one f32
//               scale s = absmax / 127 (absmax: the block's largest
//               magnitude); a value travels as round(x / s), an integer in
//               -127..127: |error| <= absmax / 254. Linear, not the
//               dynamic map of bitsandbytes: the bound is then one line.
// So a compressed mean lies within the weighted mean of the members' e_j,
// plus the mean's own rounding (and f32 summation's few ulps), of the exact
// mean.
#ifndef LOOM_COLLAB_COMPRESSION_H
#define LOOM_COLLAB_COMPRESSION_H

#include <cstdint>
#include <string>
#include <vector>

namespace loom_collab {

enum class Codec : uint8_t { none, fp16, bf16, blockwise8 };

inline constexpr uint64_t kQuantBlock = 256;  // values per blockwise8 scale (1.6% of the bytes)

// "none", "fp16", "bf16", "blockwise8" <-> Codec; parse_codec is false for
// anything else.
bool parse_codec(const std::string &name, Codec *out);
const char *codec_name(Codec c);

// Bytes n values take encoded (blockwise8: the scales first, then the codes).
uint64_t encoded_bytes(Codec c, uint64_t n);

// Encodes n finite values into encoded_bytes(c, n) bytes at out. Returns how
// many values lay beyond the codec's range and were clamped (fp16 only).
uint64_t encode(Codec c, const float *in, uint64_t n, uint8_t *out);
// Decodes what encode wrote for n values.
void decode(Codec c, const uint8_t *in, uint64_t n, float *out);

// The largest |decode(encode(x)) - x| the codec allows for value x, in a
// block whose largest magnitude is block_absmax (blockwise8 only uses it).
double codec_error_bound(Codec c, double x, double block_absmax);

// ---- The steps of a compressed mean over n members ---------------------------

// The slices of a vector of numel values over n members: chunk values each
// (the last ones padded with zeros), encoded in slice_bytes bytes each.
struct SliceLayout {
  uint64_t numel = 0, members = 0, chunk = 0, slice_bytes = 0;
  SliceLayout(Codec c, uint64_t numel, uint64_t members);
};

// Every slice of values (numel), encoded one after another into out
// (members x slice_bytes): what this member sends in the alltoall. Returns
// the values clamped.
uint64_t encode_slices(Codec c, const SliceLayout &l, const float *values, uint8_t *out);

// The owner's copies of its slice (members x slice_bytes, member j's at
// j x slice_bytes) decoded into copies (members x chunk floats, member j's
// at j x chunk).
void decode_copies(Codec c, const SliceLayout &l, const uint8_t *received, float *copies);

// sum_j w_j copy_j / sum_j w_j over the members with w_j > 0, accumulated in
// f32 (a copy of a member with w_j = 0 is never read: it may hold anything).
// out gets len values; all zeros when no member counts.
void weighted_mean(const std::vector<const float *> &copies, const std::vector<double> &weights, uint64_t len,
                   float *out);

// The gathered encoded means (members x slice_bytes) decoded into out (numel
// values: the padding is dropped).
void decode_gathered(Codec c, const SliceLayout &l, const uint8_t *gathered, float *out);

}  // namespace loom_collab

#endif
