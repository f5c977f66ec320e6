// SPDX-License-Identifier: Apache-2.0
// The pure parts of "one model per swarm" (fingerprint.h) and of who counts
// in a round (health.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fingerprint.h"
#include "health.h"

namespace loom_collab {
namespace {

const std::string kSwarm =
    "task digits\nparameter '0.weight': Float [128, 64]\nparameter '0.bias': Float [128]\noptimizer: adam\n";
const std::string kNarrow =
    "task digits\nparameter '0.weight': Float [64, 64]\nparameter '0.bias': Float [64]\noptimizer: adam\n";

TEST(Fingerprint, NamesTheFirstDifference) {
  EXPECT_EQ(first_difference(kNarrow, kSwarm, 3),
            "parameter '0.weight': Float [64, 64] here, Float [128, 64] in the swarm (3 peers)");
  EXPECT_EQ(first_difference(kSwarm + "buffer 'x': Float [1]\n", kSwarm, 1),
            "buffer 'x': Float [1] here, absent in the swarm (1 peer)");
  EXPECT_EQ(first_difference(kSwarm, kSwarm + "buffer 'x': Float [1]\n", 2),
            "absent here, buffer 'x': Float [1] in the swarm (2 peers)");
  EXPECT_EQ(first_difference("task digits\n", "task teacher\n", 2), "'task digits' here, 'task teacher' in the swarm (2 peers)");
  EXPECT_NE(first_difference(kSwarm + "more\n", kSwarm, 2, true).find("cut to fit"), std::string::npos);
  EXPECT_NE(fingerprint_of(kSwarm), fingerprint_of(kNarrow));
}

TEST(Fingerprint, TextCoversTheOptionsMembersMustShare) {
  float data[2] = {0, 0};
  int64_t shape[1] = {2};
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  loom_training_state_v1 old_host{};
  old_host.struct_size = LOOM_TRAINING_STATE_V1_4_SIZE;  // no description: positions and shapes
  old_host.num_params = 1;
  old_host.params = &t;
  Options o;
  o.collective = "ucx";
  o.target_batch_size = 256;
  const std::string direct = fingerprint_text(old_host, o, true);
  EXPECT_NE(direct.find("parameter #0: float32 [2]"), std::string::npos) << direct;
  EXPECT_NE(direct, fingerprint_text(old_host, o, false));
  Options averaging = o;
  averaging.average_state_every = 5;
  EXPECT_NE(direct, fingerprint_text(old_host, averaging, true));
  loom_training_state_v1 host = old_host;
  host.struct_size = LOOM_TRAINING_STATE_V1_5_SIZE;
  host.description = kSwarm.c_str();
  EXPECT_EQ(fingerprint_text(host, o, true).rfind(kSwarm, 0), 0u);
}

TEST(Fingerprint, APeerOfAnEarlierRoundProtocolIsNamedAsSuch) {
  loom_training_state_v1 host{};
  host.struct_size = LOOM_TRAINING_STATE_V1_5_SIZE;
  host.description = kSwarm.c_str();
  Options o;
  o.collective = "ucx";
  const std::string mine = fingerprint_text(host, o, true);
  const std::string line = "collab round protocol: " + std::to_string(kRoundProtocol) + "\n";
  ASSERT_NE(mine.find(line), std::string::npos) << mine;
  // A build from before the line (round protocol 1) describes the rest alike.
  std::string earlier = mine;
  earlier.erase(earlier.find(line), line.size());
  EXPECT_NE(fingerprint_of(mine), fingerprint_of(earlier));
  const std::string why = first_difference(mine, earlier, 3, false);
  EXPECT_NE(why.find(line.substr(0, line.size() - 1)), std::string::npos) << why;
  std::string older = mine;
  older.replace(older.find(line), line.size(), "collab round protocol: 1\n");
  EXPECT_EQ(first_difference(mine, older, 3, false),
            "collab round protocol: " + std::to_string(kRoundProtocol) + " here, 1 in the swarm (3 peers)");
}

TEST(Fingerprint, TheSwarmIsTheMajorityAndTiesGoToTheOldest) {
  EXPECT_EQ(swarm_model({{1, 500}, {1, 600}, {2, 100}}).fingerprint, 1u);
  EXPECT_EQ(swarm_model({{1, 500}, {1, 600}, {2, 100}}).peers, 2u);
  EXPECT_EQ(swarm_model({{1, 500}, {2, 100}}).fingerprint, 2u);
  EXPECT_EQ(swarm_model({{7, 5}}).fingerprint, 7u);
}

TEST(Health, MembersWithNonFiniteOrOutlyingNormsCountZero) {
  const double inf = std::numeric_limits<double>::infinity();
  MemberWeights w = member_weights({32, 32, 32}, {1.0, 2.0, 1e29});
  EXPECT_EQ(w.weight, (std::vector<double>{32, 32, 0}));
  EXPECT_EQ(w.total, 64);
  EXPECT_EQ(w.outliers, (std::vector<size_t>{2}));
  // Two members: the smaller norm is the reference.
  w = member_weights({32, 32}, {1.0, 1e30});
  EXPECT_EQ(w.total, 32);
  // A member that said its data is not finite (-1), or counted itself 0.
  w = member_weights({32, 0, 16}, {-1, 5.0, inf});
  EXPECT_EQ(w.total, 0);
  EXPECT_TRUE(w.outliers.empty());
  // Honest spread (a few times apart) all counts.
  w = member_weights({8, 256, 64}, {9.0, 0.5, 1.5});
  EXPECT_EQ(w.total, 328);
  // A member that has not moved (norm 0, just loaded) is no reference.
  w = member_weights({1, 1}, {0.0, 0.8});
  EXPECT_EQ(w.total, 2);
  EXPECT_TRUE(w.outliers.empty());
  w = member_weights({1, 1, 1}, {0.0, 0.8, 552.0}, kParameterOutlierFactor);  // the drifts of lr = 1000
  EXPECT_EQ(w.weight, (std::vector<double>{1, 1, 0}));
}

TEST(Health, SumOfSquaresSeesNanAndInfAndDoesNotOverflowFloats) {
  std::vector<float> v(37, 1.0f);
  EXPECT_EQ(sum_of_squares(v.data(), v.size()), 37.0);
  v[36] = 3e38f;
  EXPECT_TRUE(std::isfinite(sum_of_squares(v.data(), v.size())));
  v[5] = std::nanf("");
  EXPECT_FALSE(std::isfinite(sum_of_squares(v.data(), v.size())));
  v[5] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(sum_of_squares(v.data(), v.size())));
}

TEST(Health, TopUpSharesCoverTheDeficitInWholeBatches) {
  // 4 members of 256 samples against 2048: each adds its quarter of the
  // 1024 missing, in batches of 64.
  EXPECT_EQ(top_up_shares(2048, {256, 256, 256, 256}, 64), (std::vector<uint64_t>{256, 256, 256, 256}));
  // Two members 32 short: one batch between them, to the lower rank on a tie.
  EXPECT_EQ(top_up_shares(256, {112, 112}, 32), (std::vector<uint64_t>{32, 0}));
  // Reached, or nothing to share from: nobody adds.
  EXPECT_EQ(top_up_shares(2048, {1024, 1024}, 64), (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(top_up_shares(2048, {0, 0}, 64), (std::vector<uint64_t>{0, 0}));
  // A member that counts 0 adds nothing; the others cover the deficit and
  // together overshoot it by less than one batch.
  for (uint64_t batch : {1u, 7u, 32u, 64u}) {
    const std::vector<double> weights = {100, 0, 300, 600, 13};
    const auto shares = top_up_shares(4096, weights, batch);
    EXPECT_EQ(shares[1], 0u);
    uint64_t added = 0;
    for (auto s : shares) {
      EXPECT_EQ(s % batch, 0u);
      added += s;
    }
    EXPECT_GE(1013 + added, 4096u) << batch;
    EXPECT_LT(1013 + added, 4096u + batch) << batch;
  }
}

// By rate, each member's share takes it the same time: a member that
// brought one batch but trains as fast as the others draws as much.
TEST(Health, TopUpSharesFollowTheMembersRatesSoThatTheyFinishTogether) {
  const std::vector<double> weights = {64, 64 * 40, 64 * 20, 64 * 19};
  const std::vector<double> rates = {1000, 1000, 2000, 4000};
  const auto shares = top_up_shares(262144, weights, 64, rates);
  uint64_t added = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    EXPECT_EQ(shares[i] % 64, 0u);
    added += shares[i];
    // Finishing times within one batch of each other.
    EXPECT_NEAR(double(shares[i]) / rates[i], double(shares[0]) / rates[0], 64.0 / rates[i] + 64.0 / rates[0]) << i;
  }
  EXPECT_GE(64 * 80 + added, 262144u);
  EXPECT_LT(64 * 80 + added, 262144u + 64);
  // By weight (the rates left out), the member that brought one batch of
  // eighty draws 1/80 of the rest.
  EXPECT_LT(top_up_shares(262144, weights, 64)[0], 262144u / 70);
  // A member that counts but has no rate yet (or a rate that is not a
  // number) is taken at the median of the others' (1000, 1000, 4000), not
  // dropped to its weight's share: the others stay by rate.
  for (double missing : {0.0, std::nan("")}) {
    auto r = rates, stand_in = rates;
    r[2] = missing;
    stand_in[2] = 1000;
    EXPECT_EQ(top_up_shares(262144, weights, 64, r), top_up_shares(262144, weights, 64, stand_in));
  }
  // A newcomer that brought one batch and has no rate draws a full part,
  // not 1/80 of the deficit.
  EXPECT_GT(top_up_shares(262144, weights, 64, {0, 1000, 2000, 4000})[0], 262144u / 10);
  // Nobody rated: by weights.
  EXPECT_EQ(top_up_shares(262144, weights, 64, {0, 0, 0, 0}), top_up_shares(262144, weights, 64));
  // The slowest member's time for its share, the one with no rate at the
  // others' median: the time the members done first wait for it.
  EXPECT_DOUBLE_EQ(top_up_seconds({1000, 3000, 0}, {500, 1000, 2000}), 3.0);
  EXPECT_DOUBLE_EQ(top_up_seconds({1000, 3000}, {0, 2000}), 1.5);
  EXPECT_DOUBLE_EQ(top_up_seconds({4000, 1000}, {0, 2000}), 2.0);
  EXPECT_DOUBLE_EQ(top_up_seconds({1000, 3000}, {0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(top_up_seconds({}, {}), 0.0);
  // A member that counts 0 draws nothing, whatever its rate.
  const auto zero = top_up_shares(262144, {0, 64, 64, 64}, 64, rates);
  EXPECT_EQ(zero[0], 0u);
}

TEST(TopUpBox, TheGroupsSpeedIsWhatTheLastBoxBroughtElseTheFasterEstimate) {
  // A box of 0.5 s just ran: 100,000 + 300,000 samples in it.
  EXPECT_DOUBLE_EQ(top_up_group_speed({200000, 500000}, {100000, 200000}, 0.5, 9e5, 1e6), 400000 / 0.5);
  // No box: the larger of the rates' sum and the epoch's measured speed.
  EXPECT_DOUBLE_EQ(top_up_group_speed({200000, 500000}, {}, 0, 9e5, 1.2e6), 1.2e6);
  EXPECT_DOUBLE_EQ(top_up_group_speed({200000, 500000}, {}, 0, 9e5, std::nan("")), 9e5);
  // A box that brought nothing (every member lost its samples) or whose
  // members differ in number tells nothing: the estimates.
  EXPECT_DOUBLE_EQ(top_up_group_speed({0, 0}, {100, 100}, 0.5, 9e5, 0), 9e5);
  EXPECT_DOUBLE_EQ(top_up_group_speed({200000, 500000}, {100000}, 0.5, 9e5, 0), 9e5);
  EXPECT_DOUBLE_EQ(top_up_group_speed({}, {}, 0, 0, 0), 0.0);
}

TEST(TopUpBox, ALongTopUpGoesByTimeAndFallsShortOfTheDeficit) {
  // 700,000 samples at 900,000 a second: 0.78 s, boxed: 0.4 of it before
  // any box ran, 0.7 at a speed a box measured.
  EXPECT_DOUBLE_EQ(top_up_box_seconds(700000, 900000, false), 0.4 * 700000 / 900000);
  EXPECT_DOUBLE_EQ(top_up_box_seconds(700000, 900000, true), 0.7 * 700000 / 900000);
  // Under a tenth of a second at that speed: by shares.
  EXPECT_DOUBLE_EQ(top_up_box_seconds(80000, 900000, true), 0.0);
  EXPECT_GT(top_up_box_seconds(100000, 900000, true), 0.0);
  // No speed, no deficit, or a speed that is no number: by shares.
  EXPECT_DOUBLE_EQ(top_up_box_seconds(700000, 0, false), 0.0);
  EXPECT_DOUBLE_EQ(top_up_box_seconds(0, 900000, false), 0.0);
  EXPECT_DOUBLE_EQ(top_up_box_seconds(700000, std::nan(""), false), 0.0);
  // At the speed it was given, a box never brings the whole deficit.
  for (bool measured : {false, true}) EXPECT_LT(top_up_box_seconds(700000, 9e5, measured) * 9e5, 700000.0);
}

TEST(GroupTrainingRate, AMemberWithoutARateCountsAtTheOthersMedian) {
  EXPECT_DOUBLE_EQ(group_training_rate({500, 0, 700}), 500 + 600 + 700);
  EXPECT_DOUBLE_EQ(group_training_rate({500, 400}), 900);
  EXPECT_DOUBLE_EQ(group_training_rate({0, 0}), 0);
  EXPECT_DOUBLE_EQ(group_training_rate({}), 0);
}

TEST(SwarmCount, TheMembersCountIsTheirLowerMedianSoThatOneYoungViewDoesNotSetIt) {
  // Run 18's group: one member counted 1 peer, the others 58 to 64.
  EXPECT_DOUBLE_EQ(swarm_count({1, 58, 64}), 58);
  EXPECT_DOUBLE_EQ(swarm_count({64, 1, 61, 19}), 19);  // lower median of four
  EXPECT_DOUBLE_EQ(swarm_count({0, 0, 40}), 40);        // 0: a member that knows none
  EXPECT_DOUBLE_EQ(swarm_count({0, 0}), 0);
  EXPECT_DOUBLE_EQ(swarm_count({}), 0);
  EXPECT_DOUBLE_EQ(swarm_count({std::nan(""), 12}), 12);
}

TEST(SwarmCappedTarget, AGroupThatIsASmallPartOfTheSwarmHoldsAtMostTwiceItsShare) {
  // 2 of 64 peers (1/32), at 1,000 samples/s together. Met with 16,640 of
  // the whole 1,048,576 target, the rest would take 1,032 s: twice 1/32 of
  // the target (65,536), in whole batches of 64.
  EXPECT_EQ(swarm_capped_target(1048576, 1048576, 2, 64, 1000, 64, 16640, 30), 65536u);
  // A bounded part asked for over four times its share is capped too, even
  // when its members' rates say nearly nothing (first windows after a load).
  EXPECT_EQ(swarm_capped_target(381301, 1048576, 4, 64, 0.01, 64, 832, 30), 131072u);
  // A group of a quarter of the swarm or more keeps its part.
  EXPECT_EQ(swarm_capped_target(1048576, 1048576, 16, 64, 1000, 64, 0, 30), 1048576u);
  EXPECT_EQ(swarm_capped_target(349526, 1048576, 3, 9, 1000, 64, 0, 30), 349526u);
  // So does one whose top-up takes no longer than min_seconds at its rate
  // (a fast swarm: 6 digits peers' parts of 86 samples).
  EXPECT_EQ(swarm_capped_target(86, 256, 1, 6, 1000, 32, 32, 30), 86u);
  EXPECT_EQ(swarm_capped_target(1048576, 1048576, 2, 64, 1000, 64, 1048576 - 20000, 30), 1048576u);
  // Unknown: the part stands. Never under one batch.
  EXPECT_EQ(swarm_capped_target(4096, 4096, 2, 64, 0, 64, 0, 0), 4096u);
  EXPECT_EQ(swarm_capped_target(4096, 4096, 2, 0, 1000, 64, 0, 0), 4096u);
  EXPECT_EQ(swarm_capped_target(4096, 4096, 1, 1e6, 1, 64, 0, 0), 64u);
}

}  // namespace
}  // namespace loom_collab
