// SPDX-License-Identifier: Apache-2.0
// A group's hub SIGKILLed while its group tops up a short round by grants
// (top_up_grants.h). The members' next asks fail at once (nothing listens
// on the hub's port any more); each meets its group with what it trained,
// and the communicator there has lost its leader. That
// round fails, and the two left build a group of their own and average on:
// nothing waits for the dead hub beyond the round's own timeouts, and no
// peer stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

// The lines where a member of a round of all three logged its group's
// first meeting and a first grant of the deficit (averaging.cpp). A round
// of two (a peer came late) may be led by another than the smallest id.
size_t first_grants_of_three(const std::string& log) {
  size_t n = 0;
  for (size_t at = 0, end; at < log.size(); at = end + 1) {
    end = log.find('\n', at);
    if (end == std::string::npos) break;  // a line being written
    const std::string line = log.substr(at, end - at);
    n += line.find(": 3 peers (epoch ") != std::string::npos &&
         line.find("(a first grant of its group's hub") != std::string::npos;
  }
  return n;
}

TEST(TopUpHub, AHubKilledWhileItsGroupTopsUpSendsItsMembersToMeetAndThePairAveragesOn) {
  Scratch scratch;
  // A target of 2^20 on 3 teacher peers: a group formed ahead meets with a
  // part of it and tops up the rest, about a second (samples_per_round_test).
  auto sets = teacher_round_sets("hub-kill", 3, 1 << 20);
  sets.push_back("trainer.max_steps=16");
  auto peers = start_teacher_swarm(scratch, 3, sets);
  ASSERT_EQ(peers.size(), 3u) << peers[0]->tail();
  // Every round of three is led by the smallest id (matchmaking.cpp), and
  // its leader's state server is the group's hub.
  Peer* silent = sort_by_peer_id(peers);
  ASSERT_EQ(silent, nullptr) << silent->tail();
  Peer& hub = *peers[0];
  const std::string hub_at = state_address(hub);
  // Once the group topped up by grants a few times, the hub is killed as
  // soon as a member logs its first grant of a round of three: the rest of
  // that round's deficit is still to be asked for.
  ASSERT_TRUE(wait_until([&] { return count_of(hub.log(), " grants (") >= 3; }, seconds(120))) << hub.tail();
  const size_t seen[2] = {first_grants_of_three(peers[1]->log()), first_grants_of_three(peers[2]->log())};
  ASSERT_TRUE(wait_until(
      [&] {
        return first_grants_of_three(peers[1]->log()) > seen[0] || first_grants_of_three(peers[2]->log()) > seen[1];
      },
      seconds(60), milliseconds(2)))
      << peers[1]->tail() << peers[2]->tail();
  hub.kill();
  const auto killed = Clock::now();
  const std::string at_kill[2] = {peers[1]->log(), peers[2]->log()};

  int fell_back = 0;
  for (int i = 0; i < 2; ++i) {
    Peer& p = *peers[size_t(i) + 1];
    ASSERT_TRUE(wait_until(
        [&] { return count_of(p.log().substr(at_kill[i].size()), "samples with 2 peers") >= 2; }, seconds(90)))
        << p.tail();
    std::printf("[ figures  ] %s: averaged as a pair %.1f s after the kill\n", p.name().c_str(),
                std::chrono::duration<double>(Clock::now() - killed).count());
    const std::string after = p.log().substr(at_kill[i].size());
    // The ask names the hub it could not reach, and what the member does.
    const size_t at = after.find("the group's hub at " + hub_at + " gave no grant of the top-up (");
    if (at != std::string::npos) {
      ++fell_back;
      EXPECT_NE(after.find("this peer meets its group with what it trained", at), std::string::npos) << p.tail();
    }
  }
  // Both were topping up when the hub died; one may have been given what
  // was left before it and asked no more.
  EXPECT_GE(fell_back, 1) << peers[1]->tail() << peers[2]->tail();
  std::printf("[ figures  ] %d of the 2 members named the dead hub at their next ask\n", fell_back);
  for (int i = 1; i < 3; ++i) EXPECT_EQ(peers[size_t(i)]->wait_exit(seconds(120)), 0) << peers[size_t(i)]->tail();
}

// A split group's part (target_group_size) takes its grants from its own
// hub, its first member that serves (samples_per_round_test). That hub,
// not the whole group's leader, is SIGKILLed as soon as the part's other
// member logs its first grant from it: that member's next ask names the
// dead hub, it meets its part with what it trained, the part's round fails,
// and the three left average on and finish.
TEST(TopUpHub, APartsOwnHubKilledWhileItsPartTopsUpLeavesTheOthersAveragingOn) {
  constexpr int kPeers = 4;
  Scratch scratch;
  auto sets = teacher_round_sets("part-hub-kill", kPeers, 1 << 20);
  sets.push_back("trainer.max_steps=16");
  sets.push_back("strategy.options.target_group_size=2");
  auto peers = start_teacher_swarm(scratch, kPeers, sets);
  ASSERT_EQ(peers.size(), size_t(kPeers)) << peers[0]->tail();
  // The whole group's leader (the smallest id) is every part's hub when
  // there are no parts; the hub of interest is another's.
  Peer* silent = sort_by_peer_id(peers);
  ASSERT_EQ(silent, nullptr) << silent->tail();
  const std::string leader_at = state_address(*peers[0]);
  const std::string marker = "(a first grant of its group's hub at ";
  // The first member to log a first grant from a hub other than the leader.
  Peer* asker = nullptr;
  std::string hub_at;
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& p : peers) {
          const std::string log = p->log();
          for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
            const size_t from = at + marker.size(), end = log.find(')', from);
            if (end == std::string::npos) break;
            const std::string address = log.substr(from, end - from);
            if (address == leader_at) continue;
            asker = p.get();
            hub_at = address;
            return true;
          }
        }
        return false;
      },
      seconds(120), milliseconds(2)))
      << "no part asked a hub other than the whole group's leader\n" << peers[0]->tail();
  Peer* hub = nullptr;
  for (auto& p : peers)
    if (state_address(*p) == hub_at) hub = p.get();
  ASSERT_NE(hub, nullptr) << "no peer serves at " << hub_at;
  hub->kill();
  const auto killed = Clock::now();
  std::vector<Peer*> survivors;
  std::vector<std::string> at_kill;
  for (auto& p : peers)
    if (p.get() != hub) {
      survivors.push_back(p.get());
      at_kill.push_back(p->log());
    }
  for (size_t i = 0; i < survivors.size(); ++i) {
    Peer& p = *survivors[i];
    ASSERT_TRUE(wait_until([&] { return count_of(p.log().substr(at_kill[i].size()), "averaged gradients of") >= 2; },
                           seconds(90)))
        << p.name() << " did not average on after " << hub->name() << " (a part's hub) was killed\n" << p.tail();
    std::printf("[ figures  ] %s: averaged twice %.1f s after the kill%s\n", p.name().c_str(),
                std::chrono::duration<double>(Clock::now() - killed).count(),
                &p == asker ? " (the killed hub's part)" : "");
  }
  const std::string after = asker->log().substr(at_kill[size_t(
      std::find(survivors.begin(), survivors.end(), asker) - survivors.begin())].size());
  const size_t named = after.find("the group's hub at " + hub_at + " gave no grant of the top-up (");
  EXPECT_NE(named, std::string::npos) << asker->name() << " never named the dead hub\n" << asker->tail();
  if (named != std::string::npos) {
    EXPECT_NE(after.find("this peer meets its group with what it trained", named), std::string::npos) << asker->tail();
  }
  for (Peer* p : survivors) EXPECT_EQ(p->wait_exit(seconds(120)), 0) << p->tail();
}

}  // namespace
}  // namespace loom::swarm
