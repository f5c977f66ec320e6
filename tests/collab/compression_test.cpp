// SPDX-License-Identifier: Apache-2.0
// Compression on the wire (compression.h): each codec's round trip stays
// within its stated bound, and a compressed mean over a group (the same
// steps the round takes, the alltoall and allgather done by copying) lies
// within the bound the header states of the exact weighted mean.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "../common/half_float.h"
#include "compression.h"

namespace loom_collab {

// GoogleTest names a Codec parameter by this (found by argument-dependent lookup).
void PrintTo(Codec c, std::ostream *os) { *os << codec_name(c); }

namespace {

// Values of every magnitude a gradient has: normals scaled by 10^-8..10^3,
// with zeros, signs, and a few of binary16's subnormals among them.
std::vector<float> mixed_values(uint64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0, 1);
  std::uniform_real_distribution<float> exponent(-8, 3);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    v[i] = d(gen) * std::pow(10.0f, exponent(gen));
    if (i % 97 == 0) v[i] = 0;
    if (i % 89 == 0) v[i] = 3e-7f * d(gen);  // binary16 subnormal
  }
  return v;
}

// The largest magnitude in the blockwise8 block holding value i of a slice
// that starts at slice_begin (blocks count from a slice's start).
double block_absmax(const std::vector<float> &v, uint64_t slice_begin, uint64_t slice_end, uint64_t i) {
  const uint64_t b = slice_begin + (i - slice_begin) / kQuantBlock * kQuantBlock;
  double m = 0;
  for (uint64_t k = b; k < std::min(slice_end, b + kQuantBlock); ++k) m = std::max(m, double(std::fabs(v[k])));
  return m;
}

class Codecs : public ::testing::TestWithParam<Codec> {};

TEST_P(Codecs, ARoundTripStaysWithinTheStatedBound) {
  const Codec c = GetParam();
  for (uint64_t n : {1u, 255u, 256u, 257u, 5000u}) {
    const auto v = mixed_values(n, uint32_t(n));
    std::vector<uint8_t> bytes(encoded_bytes(c, n));
    EXPECT_EQ(encode(c, v.data(), n, bytes.data()), 0u) << "nothing here lies beyond any codec's range";
    std::vector<float> back(n);
    decode(c, bytes.data(), n, back.data());
    double worst = 0;  // the largest error as a share of its bound
    for (uint64_t i = 0; i < n; ++i) {
      const double bound = codec_error_bound(c, v[i], block_absmax(v, 0, n, i));
      const double err = std::fabs(double(back[i]) - double(v[i]));
      ASSERT_LE(err, bound) << codec_name(c) << " value " << i << " of " << n << ": " << v[i] << " came back as "
                            << back[i];
      if (bound > 0) worst = std::max(worst, err / bound);
    }
    if (c == Codec::none) {
      EXPECT_EQ(std::memcmp(back.data(), v.data(), 4 * n), 0);
    } else if (n == 5000) {
      EXPECT_GT(worst, 0.25) << "the bound is far looser than the codec: it says little";
    }
  }
}

TEST_P(Codecs, TakesTheBytesItStates) {
  const Codec c = GetParam();
  const uint64_t per_value[] = {4, 2, 2, 1};
  EXPECT_EQ(encoded_bytes(c, 1000), 1000 * per_value[int(c)] + (c == Codec::blockwise8 ? 4 * 4 : 0));
  EXPECT_EQ(encoded_bytes(c, 0), 0u);
}

TEST_P(Codecs, ABlockOfZerosComesBackZeros) {
  const Codec c = GetParam();
  std::vector<float> v(300, 0.0f), back(300, 1.0f);
  std::vector<uint8_t> bytes(encoded_bytes(c, v.size()));
  encode(c, v.data(), v.size(), bytes.data());
  decode(c, bytes.data(), v.size(), back.data());
  for (float x : back) ASSERT_EQ(x, 0.0f);
}

// The steps of sliced_round.cpp over n members, the collectives done by
// copying: every member's values, the weights, and the mean all decode.
struct GroupResult {
  std::vector<float> out;             // what every member decodes
  std::vector<std::vector<float>> means;  // each owner's f32 mean of its slice (before encoding)
  std::vector<std::vector<std::vector<float>>> copies;  // [owner][member] the decoded copies
};

GroupResult compressed_mean(Codec c, const std::vector<std::vector<float>> &values, const std::vector<double> &w) {
  const uint64_t n = values.size(), numel = values[0].size();
  const SliceLayout l(c, numel, n);
  std::vector<std::vector<uint8_t>> sent(n, std::vector<uint8_t>(n * l.slice_bytes));
  for (uint64_t j = 0; j < n; ++j) encode_slices(c, l, values[j].data(), sent[j].data());
  std::vector<uint8_t> gathered(n * l.slice_bytes);
  GroupResult r;
  for (uint64_t owner = 0; owner < n; ++owner) {
    std::vector<uint8_t> received(n * l.slice_bytes);  // the alltoall
    for (uint64_t j = 0; j < n; ++j)
      std::memcpy(received.data() + j * l.slice_bytes, sent[j].data() + owner * l.slice_bytes, l.slice_bytes);
    std::vector<float> copies(n * l.chunk);
    decode_copies(c, l, received.data(), copies.data());
    std::vector<const float *> ptrs(n);
    r.copies.emplace_back();
    for (uint64_t j = 0; j < n; ++j) {
      ptrs[j] = copies.data() + j * l.chunk;
      r.copies.back().emplace_back(ptrs[j], ptrs[j] + l.chunk);
    }
    std::vector<float> mean(l.chunk, 0.0f);
    const uint64_t begin = std::min(numel, owner * l.chunk), len = std::min(numel, begin + l.chunk) - begin;
    weighted_mean(ptrs, w, len, mean.data());
    r.means.push_back(mean);
    encode(c, mean.data(), l.chunk, gathered.data() + owner * l.slice_bytes);  // the allgather
  }
  r.out.assign(numel, 0.0f);
  decode_gathered(c, l, gathered.data(), r.out.data());
  return r;
}

struct GroupCase {
  uint64_t members, numel;
};

class CompressedMean : public ::testing::TestWithParam<std::tuple<Codec, GroupCase>> {};

TEST_P(CompressedMean, LiesWithinTheStatedBoundOfTheExactWeightedMean) {
  const Codec c = std::get<0>(GetParam());
  const auto [n, numel] = std::get<1>(GetParam());
  std::vector<std::vector<float>> values;
  std::vector<double> w;
  for (uint64_t j = 0; j < n; ++j) {
    values.push_back(mixed_values(numel, uint32_t(100 + j)));
    w.push_back(double(32 * (j + 1)));
  }
  // A member that counts 0 (it diverged) sends what it holds: never read.
  values.back().assign(numel, std::numeric_limits<float>::quiet_NaN());
  w.back() = 0;
  const GroupResult r = compressed_mean(c, values, w);
  const SliceLayout l(c, numel, n);
  double total = 0;
  for (double x : w) total += x;
  double worst = 0, rms = 0, scale = 0;
  for (uint64_t i = 0; i < numel; ++i) {
    const uint64_t owner = i / l.chunk, begin = owner * l.chunk, end = std::min(numel, begin + l.chunk);
    double exact = 0, bound = 0, magnitude = 0;
    for (uint64_t j = 0; j < n; ++j) {
      if (!(w[j] > 0)) continue;
      exact += w[j] * values[j][i];
      bound += w[j] * codec_error_bound(c, values[j][i], block_absmax(values[j], begin, end, i));
      magnitude += w[j] * std::fabs(values[j][i]);
    }
    exact /= total;
    bound /= total;
    const float mean = r.means[owner][i - begin];
    bound += codec_error_bound(c, mean, block_absmax(r.means[owner], 0, end - begin, i - begin));
    bound += double(n + 2) * 0x1p-23 * (magnitude / total);  // f32 summation and the division
    const double err = std::fabs(double(r.out[i]) - exact);
    ASSERT_TRUE(std::isfinite(r.out[i])) << "value " << i << ": the NaNs of a member that counts 0 came through";
    ASSERT_LE(err, bound) << codec_name(c) << ", " << n << " members, value " << i << ": " << r.out[i]
                          << " against the exact " << exact;
    if (bound > 0) worst = std::max(worst, err / bound);
    rms += err * err;
    scale += exact * exact;
  }
  std::printf("%s, %llu members, %llu values: error %.3g of the mean's norm, the worst value at %.2f of its bound\n",
              codec_name(c), static_cast<unsigned long long>(n), static_cast<unsigned long long>(numel),
              scale > 0 ? std::sqrt(rms / scale) : 0.0, worst);
}

std::string group_name(const ::testing::TestParamInfo<std::tuple<Codec, GroupCase>> &info) {
  const auto [n, numel] = std::get<1>(info.param);
  return std::string(codec_name(std::get<0>(info.param))) + "_" + std::to_string(n) + "members_" +
         std::to_string(numel) + "values";
}

INSTANTIATE_TEST_SUITE_P(EachCodec, Codecs, ::testing::Values(Codec::none, Codec::fp16, Codec::bf16, Codec::blockwise8),
                         [](const auto &info) { return std::string(codec_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(EachCodec, CompressedMean,
                         ::testing::Combine(::testing::Values(Codec::none, Codec::fp16, Codec::bf16, Codec::blockwise8),
                                            ::testing::Values(GroupCase{2, 1}, GroupCase{3, 1031}, GroupCase{5, 4000})),
                         group_name);

TEST(Compression, Fp16ClampsWhatLiesBeyondItsRangeAndCountsIt) {
  const std::vector<float> v = {1e5f, -7e4f, 65504.0f, 1.0f};
  std::vector<uint8_t> bytes(encoded_bytes(Codec::fp16, v.size()));
  EXPECT_EQ(encode(Codec::fp16, v.data(), v.size(), bytes.data()), 2u);
  std::vector<float> back(v.size());
  decode(Codec::fp16, bytes.data(), v.size(), back.data());
  EXPECT_EQ(back, (std::vector<float>{65504.0f, -65504.0f, 65504.0f, 1.0f}));
}

// encode may take the F16C instructions (x86-64 CPUs that have them): a
// member with them and one without must send the same bits.
TEST(Compression, Fp16AgreesBitForBitWithTheScalarConversion) {
  std::vector<float> v = mixed_values(10007, 3);
  for (float x : {0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f, 65504.0f, 65519.0f, -0.0f, 1.0f + 0x1p-11f,
                  1.0f + 0x1.8p-11f, 2049.0f, 2051.0f})
    v.push_back(x);  // ties, the subnormal edge, the largest finite
  std::vector<uint8_t> bytes(encoded_bytes(Codec::fp16, v.size()));
  encode(Codec::fp16, v.data(), v.size(), bytes.data());
  std::vector<float> back(v.size());
  decode(Codec::fp16, bytes.data(), v.size(), back.data());
  for (size_t i = 0; i < v.size(); ++i) {
    const float clamped = std::min(65504.0f, std::max(-65504.0f, v[i]));
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    ASSERT_EQ(h, loom_plugin_common::float_to_f16(clamped)) << "value " << i << ": " << v[i];
    ASSERT_EQ(loom_plugin_common::float_bits(back[i]), loom_plugin_common::float_bits(loom_plugin_common::f16_to_float(h)))
        << "value " << i;
  }
}

TEST(Compression, Bf16KeepsTheLargestFloatFinite) {
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> v = {big, -big, 1e38f};
  std::vector<uint8_t> bytes(encoded_bytes(Codec::bf16, v.size()));
  EXPECT_EQ(encode(Codec::bf16, v.data(), v.size(), bytes.data()), 0u);
  std::vector<float> back(v.size());
  decode(Codec::bf16, bytes.data(), v.size(), back.data());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_TRUE(std::isfinite(back[i])) << v[i];
    EXPECT_LE(std::fabs(double(back[i]) - v[i]), std::fabs(double(v[i])) * 0x1p-8) << v[i];
  }
}

TEST(Compression, ParsesTheFourNamesAndNothingElse) {
  Codec c = Codec::none;
  for (const char *name : {"none", "fp16", "bf16", "blockwise8"}) {
    ASSERT_TRUE(parse_codec(name, &c)) << name;
    EXPECT_STREQ(codec_name(c), name);
  }
  for (const char *name : {"", "FP16", "int8", "blockwise4", "fp16 "}) EXPECT_FALSE(parse_codec(name, &c)) << name;
}

}  // namespace
}  // namespace loom_collab
