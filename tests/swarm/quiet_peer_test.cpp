// SPDX-License-Identifier: Apache-2.0
// A peer that stays at one epoch longer than report_quiet_after says what
// it is doing: a fast peer that reached its share waits for its slow
// partner (in matchmaking or its group's weight exchange), and the slow one
// trains, its last micro-batch recent.
#include <gtest/gtest.h>

#include <regex>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

// The quiet lines of a log: what the training thread was doing in each.
std::vector<std::string> quiet_doings(const std::string& log) {
  static const std::regex line(
      R"(at epoch \d+ for \d+ s: the training thread is ([^;(]+?)(?: \(for \d+ s\))?; its last micro-batch [^;]+; \d+ samples held[^;]*; the swarm as read [^:]+: epoch \d+, \d+ of 512 samples there, \d+ peers?)");
  std::vector<std::string> doings;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it)
    doings.push_back((*it)[1]);
  return doings;
}

TEST(QuietPeer, APeerLongAtOneEpochSaysWhatItsTrainingThreadDoes) {
  Scratch scratch;
  // Before rates are known each peer's share is half the target (8 batches
  // of 32): about 1.6 s for the fast peer's 5 ms steps, 12 s for the slow
  // one's 1.5 s steps. report_quiet_after = 1 s.
  const std::vector<std::string> common = {
      "strategy.options.listen=127.0.0.1", "strategy.options.run_id=" + unique_run_id("quiet"),
      "strategy.options.min_peers=2", "strategy.options.target_batch_size=512", "trainer.max_steps=2",
      "strategy.options.report_quiet_after=1", "strategy.options.averaging_timeout=30"};
  Peer fast(scratch, "fast", digits_config(), slowed(common, 5));
  ASSERT_TRUE(wait_until([&] { return !fast.address().empty(); }, seconds(30))) << fast.tail();
  Peer slow(scratch, "slow", digits_config(), slowed(common, 1500), {{"LOOM_INITIAL_PEERS", fast.address()}});
  for (Peer* p : {&fast, &slow}) ASSERT_EQ(p->wait_exit(seconds(150)), 0) << p->tail();

  const auto waiting = quiet_doings(fast.log());
  ASSERT_FALSE(waiting.empty()) << "the fast peer never said what it waited for\n" << fast.tail();
  const std::regex for_its_group("matchmaking|exchanging weights with its group|waiting for its group forming "
                                 "ahead|connecting its group|in its group's round");
  EXPECT_TRUE(std::any_of(waiting.begin(), waiting.end(),
                          [&](const std::string& d) { return std::regex_search(d, for_its_group); }))
      << "the fast peer's quiet lines name no wait for its group: " << waiting.front() << "\n"
      << fast.tail();
  const auto training = quiet_doings(slow.log());
  ASSERT_FALSE(training.empty()) << slow.tail();
  EXPECT_NE(std::find(training.begin(), training.end(), "training"), training.end())
      << training.front() << "\n" << slow.tail();
}

}  // namespace
}  // namespace loom::swarm
