// SPDX-License-Identifier: Apache-2.0
// TrainingRate (training_rate.h): samples a second over the last seconds
// trained, as a peer on a loaded machine really trains them.
#include <gtest/gtest.h>

#include "training_rate.h"

namespace loom_collab {
namespace {

TEST(TrainingRate, BurstsOfQuickWindowsBetweenWaitsForTheCpuGiveWhatWasTrained) {
  // A peer that gets the CPU in slices: nine windows of 64 samples in 1 ms
  // each, then one that ends 291 ms later (descheduled meanwhile). It
  // trains 640 samples every 300 ms: 2,133 a second. The mean of the window
  // rates is about 57,600 (nine at 64,000, one at 220).
  TrainingRate rate(3.0);
  for (int slice = 0; slice < 40; ++slice) {
    for (int w = 0; w < 9; ++w) rate.add(64, 0.001);
    rate.add(64, 0.291);
  }
  EXPECT_NEAR(rate.rate(), 640.0 / 0.3, 0.1 * 640.0 / 0.3);
}

TEST(TrainingRate, FollowsAChangeOfPaceWithinAFewSecondsOfTraining) {
  TrainingRate rate(3.0);
  for (int i = 0; i < 100; ++i) rate.add(100, 0.1);  // 1,000 a second for 10 s
  EXPECT_NEAR(rate.rate(), 1000.0, 1.0);
  for (int i = 0; i < 100; ++i) rate.add(100, 0.4);  // then 250 a second for 40 s
  EXPECT_NEAR(rate.rate(), 250.0, 5.0);
}

TEST(TrainingRate, StartsAtZeroAndTakesTheFirstWindowAsItIs) {
  TrainingRate rate(3.0);
  EXPECT_EQ(rate.rate(), 0.0);
  rate.add(64, 0.0);  // no time: ignored
  rate.add(64, -1.0);
  EXPECT_EQ(rate.rate(), 0.0);
  rate.add(64, 0.5);
  EXPECT_DOUBLE_EQ(rate.rate(), 128.0);
}

}  // namespace
}  // namespace loom_collab
