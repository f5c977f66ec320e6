// SPDX-License-Identifier: Apache-2.0
// Local updates' outer optimizer and the outer state a donor sends
// (outer_step.h): the step matches torch.optim.SGD(nesterov=True) worked by
// hand, plain averaging is its special case, and a damaged, foreign or
// missing trailer is refused with a reason.
#include <gtest/gtest.h>

#include <vector>

#include "outer_step.h"

namespace loom_collab {
namespace {

TEST(OuterStep, NesterovMatchesTorchSgdWorkedByHand) {
  // SGD(lr=0.5, momentum=0.9, nesterov=True) on p = 1 with gradients 0.2
  // then -0.1: buf = 0.2, p -= 0.5 (0.2 + 0.9 * 0.2) = 0.81;
  // buf = 0.9 * 0.2 - 0.1 = 0.08, p -= 0.5 (-0.1 + 0.9 * 0.08) = 0.824.
  float anchor = 1.0f, momentum = 123.0f;  // the first step ignores what momentum held
  const float g1 = 0.2f, g2 = -0.1f;
  nesterov_outer_step(&anchor, &momentum, &g1, 1, 0.5f, 0.9f, 0);
  EXPECT_NEAR(anchor, 0.81f, 1e-6);
  EXPECT_NEAR(momentum, 0.2f, 1e-7);
  nesterov_outer_step(&anchor, &momentum, &g2, 1, 0.5f, 0.9f, 1);
  EXPECT_NEAR(anchor, 0.824f, 1e-6);
  EXPECT_NEAR(momentum, 0.08f, 1e-7);
}

TEST(OuterStep, RateOneWithoutMomentumIsParameterAveraging) {
  // The pseudo-gradient is anchor - mean(parameters): one step lands on the mean.
  std::vector<float> anchor = {1.0f, -2.0f, 3.0f}, momentum(3, 0.0f);
  const std::vector<float> mean_params = {0.5f, -1.0f, 3.25f};
  std::vector<float> g(3);
  for (size_t i = 0; i < 3; ++i) g[i] = anchor[i] - mean_params[i];
  nesterov_outer_step(anchor.data(), momentum.data(), g.data(), 3, 1.0f, 0.0f, 7);
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(anchor[i], mean_params[i]) << i;
}

TEST(OuterState, TravelsAfterTheHostBytesAndComesBackApart) {
  const std::vector<uint8_t> host = {1, 2, 3, 4, 5};
  OuterState s;
  s.steps = 42;
  s.anchor = {0.5f, -1.5f};
  s.momentum = {0.25f, 8.0f};
  std::vector<uint8_t> bytes;
  append_outer_state(host.data(), host.size(), s, &bytes);
  size_t host_len = 0;
  OuterState back;
  std::string why;
  ASSERT_TRUE(split_outer_state(bytes.data(), bytes.size(), 2, &host_len, &back, &why)) << why;
  EXPECT_EQ(host_len, host.size());
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(host_len)), host);
  EXPECT_EQ(back.steps, 42u);
  EXPECT_EQ(back.anchor, s.anchor);
  EXPECT_EQ(back.momentum, s.momentum);
}

TEST(OuterState, MissingForeignOrDamagedTrailersAreRefusedWithAReason) {
  OuterState s;
  s.anchor = {1.0f, 2.0f};
  s.momentum = {0.0f, 0.0f};
  std::vector<uint8_t> bytes;
  append_outer_state(nullptr, 0, s, &bytes);
  size_t host_len = 0;
  OuterState back;
  std::string why;
  // A plain host snapshot (a donor without local_updates).
  const std::vector<uint8_t> plain(100, 7);
  EXPECT_FALSE(split_outer_state(plain.data(), plain.size(), 2, &host_len, &back, &why));
  EXPECT_NE(why.find("no outer optimizer state"), std::string::npos) << why;
  // Another model's size.
  EXPECT_FALSE(split_outer_state(bytes.data(), bytes.size(), 3, &host_len, &back, &why));
  EXPECT_NE(why.find("for 2 parameters, this model has 3"), std::string::npos) << why;
  // Cut short in the middle: the lengths no longer add up.
  std::vector<uint8_t> cut(bytes.begin() + 4, bytes.end());
  EXPECT_FALSE(split_outer_state(cut.data(), cut.size(), 2, &host_len, &back, &why));
  EXPECT_NE(why.find("damaged"), std::string::npos) << why;
}

}  // namespace
}  // namespace loom_collab
