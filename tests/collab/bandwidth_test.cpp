// SPDX-License-Identifier: Apache-2.0
// Bandwidth-aware parts (bandwidth.h): the partition makes every member
// that owns a part finish together, a link too slow to own anything owns
// nothing, equal links get equal parts, unknown rates fall back to equal
// parts, and the rate a phase shows is read from its fastest large block.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <vector>

#include "bandwidth.h"

namespace loom_collab {
namespace {

double sum(const std::vector<double> &v) { return std::accumulate(v.begin(), v.end(), 0.0); }

TEST(Bandwidth, EqualLinksGetEqualParts) {
  const auto f = balanced_fractions({5e6, 5e6, 5e6, 5e6});
  ASSERT_EQ(f.size(), 4u);
  for (double x : f) EXPECT_NEAR(x, 0.25, 1e-9);
}

// Four members, one at a quarter of the others' rate: the slow one owns
// nothing (4 / B for its own V is already more than the fast ones need),
// and the round takes 4 / B instead of equal parts' 6 / B. All fast:
// 1.5 / B. So one slow link costs 2.67x, not 4x; no partition does better.
TEST(Bandwidth, AQuarterRateLinkOwnsNothingAndTheRoundTakesTwoThirdsOfEqualParts) {
  const double B = 1e7;
  const std::vector<double> rates = {B, B, B, B / 4};
  const auto f = balanced_fractions(rates);
  EXPECT_NEAR(sum(f), 1.0, 1e-12);
  EXPECT_EQ(f[3], 0.0);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(f[i], 1.0 / 3, 1e-9);
  const std::vector<double> equal(4, 0.25);
  EXPECT_NEAR(butterfly_time(equal, rates) * B, 6.0, 1e-9);
  EXPECT_NEAR(butterfly_time(f, rates) * B, 4.0, 1e-9);
  EXPECT_NEAR(butterfly_time(equal, std::vector<double>(4, B)) * B, 1.5, 1e-9);
}

// A milder spread: every member owns a part, and all finish together.
TEST(Bandwidth, WhenEveryMemberOwnsAPartAllFinishTogether) {
  const std::vector<double> rates = {8e6, 9e6, 10e6, 11e6, 12e6};
  const auto f = balanced_fractions(rates);
  EXPECT_NEAR(sum(f), 1.0, 1e-12);
  const size_t n = rates.size();
  double first = -1;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_GT(f[i], 0) << i;
    const double t = (1 + double(n - 2) * f[i]) / rates[i];
    if (first < 0) {
      first = t;
    }
    EXPECT_NEAR(t, first, first * 1e-9) << i;
    if (i > 0) {
      EXPECT_GT(f[i], f[i - 1]) << "a faster link owns more";
    }
  }
  EXPECT_LT(butterfly_time(f, rates), butterfly_time(std::vector<double>(n, 1.0 / double(n)), rates));
}

TEST(Bandwidth, UnknownRatesAndPairsGetEqualParts) {
  for (const auto &rates : std::vector<std::vector<double>>{{1e6, 0, 1e6}, {1e6, -1, 2e6}, {1e6, 4e6}}) {
    const auto f = balanced_fractions(rates);
    for (double x : f) EXPECT_NEAR(x, 1.0 / double(rates.size()), 1e-12);
  }
}

TEST(Bandwidth, OffsetsCoverEveryValueOnceAndAnEmptyPartIsEmpty) {
  const auto at = part_offsets({1.0 / 3, 1.0 / 3, 1.0 / 3, 0.0}, 1000);
  ASSERT_EQ(at.size(), 5u);
  EXPECT_EQ(at[0], 0u);
  EXPECT_EQ(at[3], 1000u);
  EXPECT_EQ(at[4], 1000u);
  for (size_t i = 0; i + 1 < at.size(); ++i) EXPECT_LE(at[i], at[i + 1]);
  EXPECT_EQ(at[1], 333u);
}

TEST(Bandwidth, APhaseRateIsTheSumOfItsLargeBlocksRates) {
  // Three blocks of 1 MiB sharing a link; small blocks say nothing.
  const uint64_t MiB = 1 << 20;
  EXPECT_NEAR(phase_rate({{MiB, 0.1}, {MiB, 0.2}, {MiB, 0.5}}), MiB * (10 + 5 + 2), 1e-3);
  EXPECT_NEAR(phase_rate({{MiB, 0.1}, {1000, 0.0001}}), MiB * 10, 1e-3);
  EXPECT_EQ(phase_rate({{1000, 0.001}, {1000, 0.002}}), 0.0);
  EXPECT_EQ(phase_rate({}), 0.0);
}

// A far end can only slow a block: the link keeps the best rate of its
// last rounds, per direction, and is as fast as its slower direction.
TEST(Bandwidth, TheRateIsTheBestOfTheLastRoundsAndTheSlowerDirection) {
  LinkRate r;
  EXPECT_EQ(r.value(), 0.0);
  r.observe(8e6, 0);
  EXPECT_EQ(r.value(), 8e6) << "one direction known";
  r.observe(2e6, 10e6);
  EXPECT_EQ(r.value(), 8e6) << "a slow round does not lower the best";
  r.observe(0, 6e6);
  EXPECT_EQ(r.value(), 8e6);
  r.observe(-1, std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.value(), 8e6) << "nonsense is ignored";
  for (int i = 0; i < kRateWindow; ++i) r.observe(3e6, 4e6);
  EXPECT_EQ(r.value(), 3e6) << "after a window of slower rounds the link is slower";
}

// The ring is faster on links alike: parts go where they pay, or to
// measure (a rate unknown, or every kReprobeEvery epochs); never for two.
TEST(Bandwidth, PartsGoWhereTheyPayOrToMeasure) {
  const double B = 1e7;
  EXPECT_TRUE(parts_pay({B, B, B, B / 4}, 3)) << "a quarter-rate link: 4 / B against 6 / B";
  EXPECT_FALSE(parts_pay({B, B, B, B}, 3));
  EXPECT_FALSE(parts_pay({B, 1.1 * B, 0.9 * B, B}, 3)) << "noise is not worth leaving the ring";
  EXPECT_TRUE(parts_pay({B, B, B, B}, kReprobeEvery * 4)) << "a periodic measurement";
  EXPECT_TRUE(parts_pay({B, 0, B}, 3)) << "a rate not known yet";
  EXPECT_FALSE(parts_pay({B, B / 10}, 3)) << "two members move V each whatever the parts";
}

}  // namespace
}  // namespace loom_collab
