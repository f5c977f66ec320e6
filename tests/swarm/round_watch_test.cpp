// SPDX-License-Identifier: Apache-2.0
// Matchmaking reads the round's keys through watches (dht.h): the joins and
// the group record come as the nodes push them, and a get is sent only
// when a watch stays silent or a leader closes on its window. Four real
// processes train; their matchmaking lines count each kind of read.
#include <gtest/gtest.h>

#include <regex>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr int kPeers = 4;
constexpr int64_t kTarget = 1024;

struct Matchmaking {
  long count = 0, join_reads = 0, join_gets = 0, group_gets = 0;
};

// Sums a peer's "matchmaking at epoch E attempt A: ..., read the join key R
// times (V values) and the group key G times; gets: J of the join key, K of
// the group key" lines.
Matchmaking matchmaking_of(const std::string& log) {
  static const std::regex line(
      R"(matchmaking at epoch \d+ attempt \d+: .*?, read the join key (\d+) times \(\d+ values\) and the group key )"
      R"(\d+ times; gets: (\d+) of the join key, (\d+) of the group key)");
  Matchmaking m;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    ++m.count;
    m.join_reads += std::stol((*it)[1]);
    m.join_gets += std::stol((*it)[2]);
    m.group_gets += std::stol((*it)[3]);
  }
  return m;
}

TEST(RoundWatch, FourPeersMeetThroughWatchesAndSendAGetInFewRounds) {
  Scratch scratch;
  auto peers = start_teacher_swarm(scratch, kPeers, teacher_round_sets("round-watch", kPeers, kTarget));
  ASSERT_EQ(peers.size(), size_t(kPeers)) << "p0 never listened\n" << peers[0]->tail();
  const auto deadline = Clock::now() + seconds(150);
  Matchmaking all;
  size_t rounds = 0;
  for (size_t i = 0; i < peers.size(); ++i) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    EXPECT_EQ(peers[i]->wait_exit(std::max(left, milliseconds(1))), 0) << peers[i]->tail();
    const std::string log = peers[i]->log();
    const Matchmaking m = matchmaking_of(log);
    std::printf("p%zu: %ld matchmakings, %ld reads of the join key's watch, gets: %ld of the join key, %ld of the "
                "group key\n",
                i, m.count, m.join_reads, m.join_gets, m.group_gets);
    all.count += m.count;
    all.join_reads += m.join_reads;
    all.join_gets += m.join_gets;
    all.group_gets += m.group_gets;
    for (const auto& r : averaged_rounds(log)) {
      ++rounds;
      EXPECT_GE(r.samples, kTarget) << "p" << i << " epoch " << r.epoch << " with " << r.peers << " peers";
    }
    EXPECT_EQ(last_finished_epoch(log), 29) << "p" << i;
  }
  ASSERT_GE(all.count, 4 * kPeers) << "too few matchmakings to judge";
  EXPECT_GE(rounds, size_t(kPeers));
  // Every matchmaking read its joins from the watch (its own join at least).
  EXPECT_GE(all.join_reads, all.count);
  // With polling, each matchmaking read the keys 10 or more times; with
  // watches that bring nothing, each would send a get 250 ms in.
  EXPECT_LE(all.join_gets + all.group_gets, all.count / 4) << all.count << " matchmakings";
}

}  // namespace
}  // namespace loom::swarm
