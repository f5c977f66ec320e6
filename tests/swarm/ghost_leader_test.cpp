// SPDX-License-Identifier: Apache-2.0
// A leader killed just after it joined a round: its join stays under the
// round's key until its ttl, the smallest id there, and it never closes a
// group. Followers that come to that attempt later see how long ago it
// joined and go on to the next attempt at once, instead of waiting a whole
// window for it (in a 64-peer churn run, rounds failed again and again on
// such joins). The ghost is loom_swarm_rogue --ghost, which joins attempt 0
// of every epoch two ahead of the swarm's with an id below 2^56.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "support/subprocess.hpp"
#include "swarm.hpp"

namespace loom::swarm {
namespace {

TEST(GhostLeader, FollowersSkipALeaderThatJoinedLongAgoAndAverageAtTheNextAttempt) {
  Scratch scratch;
  const std::string run_id = unique_run_id("ghost");
  // Epochs of about 4 s (2,048 samples a target, a step 100 ms late): the
  // ghost's join is two epochs old when the peers come to its round, past
  // matchmaking_time (1 s) and the 3 s a leader may take to publish.
  const int64_t steps = 12;
  const std::vector<std::string> sets =
      slowed({"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true", "strategy.options.run_id=" + run_id,
              "trainer.max_steps=" + std::to_string(steps), "strategy.options.target_batch_size=2048",
              "strategy.options.min_peers=2"},
             100);
  Peer a(scratch, "a", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, "b", digits_config(), sets, {{"LOOM_INITIAL_PEERS", a.address()}});
  const std::string ghost_log = scratch.path("ghost.log");
  loom::test::Child ghost({rogue_binary(), "--ghost", run_id, a.address(), "300"}, {}, ghost_log);
  ASSERT_TRUE(wait_until([&] { return read_text(ghost_log).find("rogue ghost joined") != std::string::npos; },
                         seconds(60)))
      << read_text(ghost_log) << a.tail();

  for (Peer* p : {&a, &b}) EXPECT_EQ(p->wait_exit(seconds(150)), 0) << p->tail();
  const std::string ghost_id = rogue_peer_id(ghost_log);
  ASSERT_FALSE(ghost_id.empty()) << read_text(ghost_log);
  for (Peer* p : {&a, &b}) {
    const std::string id = own_peer_id(p->log());
    ASSERT_FALSE(id.empty()) << p->tail();
    ASSERT_LT(std::stoull(ghost_id), std::stoull(id)) << "the ghost would not lead: its id is not the smallest";
  }
  std::set<int64_t> ghosted;
  const std::string text = read_text(ghost_log);
  const std::regex joined(R"(rogue ghost joined epoch (\d+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), joined); it != std::sregex_iterator(); ++it)
    if (int64_t e = std::stoll((*it)[1]); e < steps) ghosted.insert(e);
  ASSERT_GE(ghosted.size(), 3u) << text;

  size_t skipped = 0, waited = 0;
  for (Peer* p : {&a, &b}) {
    const std::string log = p->log();
    skipped += count_of(log, "published no group (gone: the next attempt)");
    waited += count_of(log, "a follower that no group listed");
    // Every epoch the ghost joined was averaged by both peers all the same.
    std::set<int64_t> together;
    for (const auto& r : averaged_rounds(log))
      if (r.peers >= 2) together.insert(r.epoch);
    for (int64_t e : ghosted) EXPECT_TRUE(together.count(e)) << p->name() << " did not average epoch " << e << "\n" << p->tail();
  }
  std::printf("[ figures  ] %zu ghosted epochs: %zu matchmakings skipped the ghost, %zu waited a window for a group\n",
              ghosted.size(), skipped, waited);
  // Each ghosted epoch's attempt 0 is skipped by at least one peer (the two
  // may also meet at attempt 0 of an epoch the ghost had not joined yet).
  EXPECT_GE(skipped, ghosted.size()) << a.tail() << b.tail();
  EXPECT_EQ(waited, 0u) << a.tail() << b.tail();
}

}  // namespace
}  // namespace loom::swarm
