// SPDX-License-Identifier: Apache-2.0
// CenteredClip (robust.h): a group's robust mean, against honest members and
// a minority of rogues sending scaled, sign-flipped or arbitrary values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "robust.h"

namespace loom_collab {
namespace {

double norm(const std::vector<float> &a, const std::vector<float> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

double norm(const std::vector<float> &a) { return norm(a, std::vector<float>(a.size(), 0.0f)); }

// n honest members: a common gradient plus per-member noise (what batches
// of one model differ by), seeded.
std::vector<std::vector<float>> honest_copies(size_t n, size_t len, double noise, uint32_t seed = 7) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> g(len);
  for (auto &x : g) x = d(gen);
  std::vector<std::vector<float>> out(n, g);
  for (auto &c : out)
    for (auto &x : c) x += float(noise) * d(gen);
  return out;
}

std::vector<float> mean_of(const std::vector<std::vector<float>> &copies) {
  std::vector<float> m(copies[0].size(), 0.0f);
  for (const auto &c : copies)
    for (size_t i = 0; i < m.size(); ++i) m[i] += c[i] / float(copies.size());
  return m;
}

std::vector<float> clip(const std::vector<std::vector<float>> &copies, std::vector<double> weights = {},
                        double radius = 1.0, int iterations = 5) {
  if (weights.empty()) weights.assign(copies.size(), 1.0);
  std::vector<const float *> p;
  for (const auto &c : copies) p.push_back(c.data());
  std::vector<float> out(copies[0].size());
  centered_clip(p, weights, out.size(), radius, iterations, out.data());
  return out;
}

TEST(CenteredClip, IdenticalCopiesGiveThemBack) {
  auto copies = honest_copies(4, 100, 0.0);
  EXPECT_EQ(norm(clip(copies), copies[0]), 0.0);
}

TEST(CenteredClip, AWideRadiusIsTheWeightedMean) {
  auto copies = honest_copies(4, 1000, 0.5);
  const std::vector<double> w = {1, 2, 3, 4};
  std::vector<float> expect(1000, 0.0f);
  for (size_t j = 0; j < 4; ++j)
    for (size_t i = 0; i < expect.size(); ++i) expect[i] += float(w[j] / 10) * copies[j][i];
  EXPECT_LT(norm(clip(copies, w, 1e6, 1), expect), 1e-4 * norm(expect));
}

TEST(CenteredClip, OneMemberOfFourScalingByMinusTenIsHeldOff) {
  auto copies = honest_copies(4, 2000, 0.3);
  const std::vector<float> honest = mean_of({copies[0], copies[1], copies[2]});
  for (auto &x : copies[3]) x *= -10;
  const std::vector<float> mean = mean_of(copies);
  const std::vector<float> robust = clip(copies);
  // The mean points the other way; CenteredClip stays by the honest mean.
  EXPECT_GT(norm(mean, honest), norm(honest));
  EXPECT_LT(norm(robust, honest), 0.15 * norm(honest)) << norm(robust, honest) / norm(honest);
}

TEST(CenteredClip, AMinorityOfArbitraryValuesIsHeldOff) {
  auto copies = honest_copies(7, 500, 0.2, 11);
  const std::vector<float> honest = mean_of({copies[0], copies[1], copies[2], copies[3]});
  for (size_t j = 4; j < 7; ++j)
    for (size_t i = 0; i < copies[j].size(); ++i) copies[j][i] = (i % 2 ? 1e30f : -1e30f) * float(j);
  const std::vector<float> robust = clip(copies);
  EXPECT_LT(norm(robust, honest), 0.5 * norm(honest)) << norm(robust, honest) / norm(honest);
}

TEST(CenteredClip, WeightZeroAndNotFiniteCopiesAreLeftOut) {
  auto copies = honest_copies(3, 50, 0.0);
  copies.push_back(std::vector<float>(50, 1e9f));
  copies.push_back(std::vector<float>(50, std::numeric_limits<float>::quiet_NaN()));
  const std::vector<float> out = clip(copies, {1, 1, 1, 0, 1});
  EXPECT_EQ(norm(out, copies[0]), 0.0);
  // Nobody left: zeros, never nan.
  const std::vector<float> none = clip({copies[3], copies[4]}, {0, 1});
  EXPECT_EQ(norm(none), 0.0);
}

TEST(CenteredClip, AnEmptySliceIsFine) {
  std::vector<const float *> p = {nullptr, nullptr};
  EXPECT_EQ(centered_clip(p, {1, 1}, 0, 1.0, 5, nullptr).clipped, 0u);
}

TEST(CenteredClip, AClaimOfManySamplesCountsAtMostTheMedian) {
  EXPECT_EQ(capped_weights({100, 100, 120, 1e12}), (std::vector<double>{100, 100, 100, 100}));
  EXPECT_EQ(capped_weights({100, 1e12}), (std::vector<double>{100, 100}));  // two members: still capped
  EXPECT_EQ(capped_weights({30, 10, 20}), (std::vector<double>{20, 10, 20}));
  EXPECT_EQ(capped_weights({0, 50, 0}), (std::vector<double>{0, 50, 0}));
  EXPECT_EQ(capped_weights({0, 0}), (std::vector<double>{0, 0}));
}

}  // namespace
}  // namespace loom_collab
