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
         line.find("(a first grant of its group's hub)") != std::string::npos;
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
  for (auto& p : peers)
    ASSERT_TRUE(wait_until([&] { return !own_peer_id(p->log()).empty(); }, seconds(30))) << p->tail();
  std::sort(peers.begin(), peers.end(), [](const auto& a, const auto& b) {
    return std::stoull(own_peer_id(a->log())) < std::stoull(own_peer_id(b->log()));
  });
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

}  // namespace
}  // namespace loom::swarm
