// SPDX-License-Identifier: Apache-2.0
// Bandwidth-aware parts (balance_bandwidth = true, balanced_round.cpp):
// three digits peers average every round by point-to-point blocks with parts
// sized by their measured link rates, train digits as well as three peers
// that average with the collective's allreduce in the same test, and end
// with equal parameters. Digits' gradients are too small (38 KB) for a
// block to tell a link's rate, so every round measures by equal parts; the
// parts sized by rate, and the choice between them and the ring, are
// bandwidth.h's unit tests and bench/swarm_links.py --slow-mbit.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

struct ThreeRun {
  double accuracy = -1;    // the peers' mean; -1: one failed
  size_t balanced = 0;     // rounds averaged by parts, summed over the peers
  size_t averaged = 0;     // averaged rounds, summed
  double difference = -1;  // largest parameter difference from peer 0
  double smallest_part = 1;  // the smallest part any round gave any member
};

ThreeRun three_peers(const Scratch& scratch, const std::string& tag, bool balance) {
  const std::vector<std::string> sets = {"trainer.threads=1", "task.test_fraction=0.5",
                                         "strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                         "strategy.options.min_peers=3",
                                         std::string("strategy.options.balance_bandwidth=") + (balance ? "true" : "false"),
                                         "strategy.options.run_id=" + unique_run_id("balance-" + tag)};
  ThreeRun out;
  const DigitsRun run = run_digits_swarm(scratch, 3, sets, tag, 100);
  if (run.accuracy < 0) return out;
  const std::regex part(R"(([0-9.]+) \([0-9.]+ MB/s\))");
  for (const std::string& log : run.logs) {
    out.balanced += count_of(log, "parts by link rate: ");
    out.averaged += averaged_rounds(log).size();
    for (std::sregex_iterator it(log.begin(), log.end(), part), end; it != end; ++it)
      out.smallest_part = std::min(out.smallest_part, std::stod((*it)[1]));
  }
  out.accuracy = run.accuracy;
  out.difference = run.difference;
  return out;
}

TEST(BalanceBandwidth, ThreeDigitsPeersTrainAsWithTheAllreduceAndEndEqual) {
  Scratch scratch;
  const ThreeRun plain = three_peers(scratch, "allreduce", false);
  ASSERT_GE(plain.accuracy, 0.9) << "three peers did not train digits: nothing to compare with";
  EXPECT_EQ(plain.balanced, 0u);
  const ThreeRun parts = three_peers(scratch, "parts", true);
  ASSERT_GE(parts.accuracy, 0);
  std::printf("[ figures  ] allreduce: accuracy %.4f; parts by link rate: accuracy %.4f (%+.4f), %zu of %zu averaged "
              "rounds by parts, smallest part %.3f, parameters apart by %.3g\n",
              plain.accuracy, parts.accuracy, parts.accuracy - plain.accuracy, parts.balanced, parts.averaged,
              parts.smallest_part, parts.difference);
  EXPECT_GE(parts.accuracy, plain.accuracy - 0.01);
  EXPECT_GE(parts.balanced, parts.averaged * 9 / 10) << "rounds of three go by parts";
  EXPECT_GT(parts.averaged, 3u * 50);
  EXPECT_LE(parts.difference, 1e-6) << "the last epoch averages the state: the peers end equal";
}

// A member SIGKILLed while the others average by parts: the round it was in
// fails, is retried without it, and the two finish. (Digits' rounds take
// milliseconds beside their compute: in the runs so far the kill fell
// between blocks, in matchmaking or the weight exchange, so a failure inside
// the blocks themselves is not what this shows.)
TEST(BalanceBandwidth, AMemberKilledMidRunLeavesTheOthersTraining) {
  Scratch scratch;
  const std::vector<std::string> sets = {"trainer.threads=1", "trainer.max_steps=150",
                                         "strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                         "strategy.options.min_peers=3", "strategy.options.balance_bandwidth=true",
                                         "strategy.options.averaging_timeout=10",
                                         "strategy.options.run_id=" + unique_run_id("balance-kill")};
  auto peers = start_swarm(scratch, 3, digits_config(), sets, "k");
  ASSERT_EQ(peers.size(), 3u) << peers[0]->tail();
  ASSERT_TRUE(wait_until([&] { return count_of(peers[2]->log(), "parts by link rate: ") >= 20; }, seconds(120)))
      << peers[2]->tail();
  peers[2]->kill();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(peers[size_t(i)]->wait_exit(seconds(180)), 0) << peers[size_t(i)]->tail();
    const auto final = final_result(peers[size_t(i)]->log());
    ASSERT_TRUE(final) << peers[size_t(i)]->tail();
    EXPECT_EQ(final->steps, 150);
    EXPECT_GE(final->accuracy, 0.9) << peers[size_t(i)]->name();
  }
  // After the kill the two average alone together: by the ring (parts do
  // not pay for two).
  EXPECT_GE(count_of(peers[0]->log(), "with 2 peers"), 20u) << peers[0]->tail();
}

}  // namespace
}  // namespace loom::swarm
