// SPDX-License-Identifier: Apache-2.0
// A peer that joins after ten epochs loads the swarm's state (parameters,
// optimizer, epoch) within load_state_timeout and averages from there on:
// with progress read from the DHT (3 peers under "auto") and from peers'
// tables ("peers", where the DHT's copies of records lag: the joiner's
// first read is still the DHT's). In a slow swarm, whose next sync point is
// further off than load_state_timeout, it loads the last one and follows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <regex>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr double kLoadStateTimeout = 20.0;

class LateJoiner : public ::testing::TestWithParam<std::string> {};

TEST_P(LateJoiner, LoadsTheCurrentStateAndAveragesFromIt) {
  Scratch scratch;
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("late"),
                                           "trainer.max_steps=300", "strategy.options.load_state_timeout=20",
                                           "strategy.options.progress_source=\"" + GetParam() + "\""};
  auto pair = common;
  pair.push_back("strategy.options.min_peers=2");
  Peer p1(scratch, "p1", digits_config(), pair);
  ASSERT_TRUE(wait_until([&] { return !p1.address().empty(); }, seconds(30))) << p1.tail();
  Peer p2(scratch, "p2", digits_config(), pair, {{"LOOM_INITIAL_PEERS", p1.address()}});

  // Both finished epoch 10: the swarm is at epoch 11 or later.
  ASSERT_TRUE(wait_until([&] { return last_finished_epoch(p1.log()) >= 10 && last_finished_epoch(p2.log()) >= 10; },
                         seconds(90)))
      << p1.tail() << p2.tail();
  const int64_t swarm_epoch = std::min(last_finished_epoch(p1.log()), last_finished_epoch(p2.log())) + 1;
  Peer late(scratch, "late", digits_config(), common, {{"LOOM_INITIAL_PEERS", p2.address()}});

  ASSERT_TRUE(wait_until([&] { return !loaded_states(late.log()).empty() || !late.running(); },
                         seconds(int(kLoadStateTimeout) + 30)))
      << late.tail();
  const double after_start = std::chrono::duration<double>(Clock::now() - late.started()).count();
  const auto loaded = loaded_states(late.log());
  ASSERT_FALSE(loaded.empty()) << late.tail();
  const Loaded l = loaded.front();
  std::printf("[ figures  ] late joiner: state of epoch %lld (%llu bytes) loaded in %.3f s, seen %.1f s after its start "
              "(swarm at epoch >= %lld when it started)\n",
              static_cast<long long>(l.epoch), static_cast<unsigned long long>(l.bytes), l.seconds, after_start,
              static_cast<long long>(swarm_epoch));
  EXPECT_GE(l.epoch, 10);
  EXPECT_GE(l.epoch, swarm_epoch) << "it loaded an epoch older than the swarm's when it started";
  EXPECT_LE(l.seconds, kLoadStateTimeout);
  EXPECT_GT(l.bytes, 0u);

  // Its first averaged step is at the loaded epoch or later, and it did not
  // step on its own before: it started from the swarm's parameters.
  ASSERT_TRUE(wait_until([&] { return !averaged_rounds(late.log()).empty() || !late.running(); }, seconds(60)))
      << late.tail();
  const std::string log = late.log();
  const auto rounds = averaged_rounds(log);
  ASSERT_FALSE(rounds.empty()) << late.tail();
  EXPECT_GE(rounds.front().epoch, l.epoch) << late.tail();
  EXPECT_GE(rounds.front().peers, 2) << late.tail();
  const auto finished = finished_epochs(log);
  ASSERT_FALSE(finished.empty());
  EXPECT_GE(*std::min_element(finished.begin(), finished.end()), l.epoch) << late.tail();

  const auto deadline = Clock::now() + seconds(90);
  for (Peer* p : {&p1, &p2, &late}) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    EXPECT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
  }
}

// Epochs of about 4 s (2 peers, 2,048 samples a target, a step 100 ms
// late), a sync point every 5, and a load_state_timeout of 6 s: asked for
// the swarm's epoch, donors would answer at its next sync point, 4 to 16 s
// away, and the load timed out (the joiner then trained from its own
// random parameters). It loads the last sync point, whose state the others
// snapshot as they reach it, and follows the swarm to its epoch.
TEST(SlowSwarmJoiner, LoadsTheLastSyncPointAndFollowsTheSwarm) {
  Scratch scratch;
  const std::vector<std::string> common =
      slowed({"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
              "strategy.options.run_id=" + unique_run_id("slowjoin"), "trainer.max_steps=14",
              "strategy.options.target_batch_size=2048", "strategy.options.average_state_every=5",
              "strategy.options.load_state_timeout=6"},
             100);
  auto pair = common;
  pair.push_back("strategy.options.min_peers=2");
  Peer p1(scratch, "p1", digits_config(), pair);
  ASSERT_TRUE(wait_until([&] { return !p1.address().empty(); }, seconds(30))) << p1.tail();
  Peer p2(scratch, "p2", digits_config(), pair, {{"LOOM_INITIAL_PEERS", p1.address()}});
  // Past the first sync point: the swarm is at epoch 6 or later.
  ASSERT_TRUE(wait_until([&] { return last_finished_epoch(p1.log()) >= 6 && last_finished_epoch(p2.log()) >= 6; },
                         seconds(120)))
      << p1.tail() << p2.tail();
  Peer late(scratch, "late", digits_config(), common, {{"LOOM_INITIAL_PEERS", p2.address()}});
  ASSERT_TRUE(wait_until([&] { return !loaded_states(late.log()).empty() || !late.running(); }, seconds(40)))
      << late.tail();
  const std::string log = late.log();
  // "this peer is at epoch 0, the swarm at N": what it caught up with.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(this peer is at epoch \d+, the swarm at (\d+))"))) << late.tail();
  const int64_t swarm = std::stoll(m[1]);
  const auto loaded = loaded_states(log);
  ASSERT_FALSE(loaded.empty()) << late.tail();
  std::printf("[ figures  ] slow swarm at epoch %lld: the joiner loaded epoch %lld in %.3f s\n",
              static_cast<long long>(swarm), static_cast<long long>(loaded.front().epoch), loaded.front().seconds);
  EXPECT_EQ(count_of(log, "could not load the swarm's state"), 0u) << late.tail();
  EXPECT_EQ(loaded.front().epoch, swarm - swarm % 5) << "not the last sync point\n" << late.tail();
  if (swarm % 5 != 0) {
    EXPECT_NE(log.find("following it to epoch " + std::to_string(swarm)), std::string::npos) << late.tail();
  }
  // It then averages with the others at the swarm's epoch or later.
  ASSERT_TRUE(wait_until([&] { return !averaged_rounds(late.log()).empty() || !late.running(); }, seconds(60)))
      << late.tail();
  const auto rounds = averaged_rounds(late.log());
  ASSERT_FALSE(rounds.empty()) << late.tail();
  EXPECT_GE(rounds.front().epoch, swarm) << late.tail();
  EXPECT_GE(rounds.front().peers, 2) << late.tail();

  const auto deadline = Clock::now() + seconds(120);
  for (Peer* p : {&p1, &p2, &late}) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    EXPECT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
  }
}

INSTANTIATE_TEST_SUITE_P(ProgressSource, LateJoiner, ::testing::Values("auto", "peers"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom::swarm
