// SPDX-License-Identifier: Apache-2.0
// SwarmDht's puts: a put retried while unconfirmed is not sent again; values
// put within one expiry grain expire together. Real OpenDHT nodes on loopback, in this process, destroyed before the test ends.
#include "dht.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dht_support.hpp"

namespace loom_collab {
namespace {

using namespace dht_test;
using namespace std::chrono;
using Clock = steady_clock;

// The puts this node sent under keys of one kind (ops_by_kind's count).
int puts_sent(const SwarmDht &n, const std::string &kind) {
  const std::string all = n.ops_by_kind(), at = kind + ": ";
  const size_t from = all.find(at);
  if (from == std::string::npos) return 0;
  const size_t comma = all.find("), ", from);
  return std::stoi(all.substr(comma + 3));
}

TEST(SwarmDhtPut, ARetriedPutWhileUnconfirmedIsNotSentAgain) {
  auto nodes = connected_nodes(4);
  // The seed counts as connected once it has heard back from a peer of its own.
  const auto t0 = Clock::now();
  while (nodes[0]->good_nodes() == 0 && Clock::now() - t0 < kConnect) std::this_thread::sleep_for(milliseconds(5));
  // A target node gone: OpenDHT confirms a put once every target node acked
  // or expired, seconds here, so a caller's 300 ms wait runs out and it
  // retries, as matchmaking does with its join.
  nodes[3].reset();
  SwarmDht &user = *nodes[0];
  const std::string key = "loom/r/join/1";
  int calls = 0;
  bool ok = false;
  while (!ok && calls < 5) {
    ok = user.put(key, 7, bytes("join"), seconds(60), milliseconds(300));
    ++calls;
  }
  ASSERT_GE(calls, 2) << "the first put confirmed within 300 ms although a target node was gone: nothing was retried";
  EXPECT_EQ(puts_sent(user, "join"), 1) << calls << " calls; " << user.ops_by_kind();
  EXPECT_EQ(texts(nodes[1]->get(key, kOp)), std::vector<std::string>{"join"});
  // Another value under the same id is a new put, and so is the same value
  // once its put has ended (a refresh).
  const auto until = Clock::now() + seconds(10);
  while (!user.put(key, 7, bytes("join"), seconds(60), kOp) && Clock::now() < until) {
  }
  const int after_refresh = puts_sent(user, "join");
  EXPECT_GE(after_refresh, 2);
  user.put(key, 7, bytes("join, changed"), seconds(60), milliseconds(0));
  EXPECT_EQ(puts_sent(user, "join"), after_refresh + 1);
}

// OpenDHT tells every watcher of a key of each batch of values that expire
// at once: a round's joins, put over its window, must expire as one batch.
TEST(SwarmDhtPut, ValuesPutWithinOneExpiryGrainLeaveEveryNodeTogether) {
  auto nodes = connected_nodes(4);
  const auto t0 = Clock::now();
  while (nodes[0]->good_nodes() == 0 && Clock::now() - t0 < kConnect) std::this_thread::sleep_for(milliseconds(5));
  const auto wall_ms = [] { return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count(); };
  // Just past a 4 s boundary of the wall clock, so that puts 1.2 s apart
  // with a 2 s ttl fall in one 4 s grain: both expire at its end, where
  // their ttls alone would end them a second apart.
  while (wall_ms() % 4000 >= 200) std::this_thread::sleep_for(milliseconds(5));
  const int64_t grain_end = (wall_ms() / 4000 + 1) * 4000;
  const std::string key = "loom/r/join/2";
  ASSERT_TRUE(nodes[1]->put(key, 1, bytes("early"), seconds(2), kOp, seconds(4)));
  std::this_thread::sleep_for(milliseconds(1200));
  ASSERT_TRUE(nodes[2]->put(key, 2, bytes("late"), seconds(2), kOp, seconds(4)));
  // Nodes 0 and 3 put nothing: what either stores is the two values (a
  // put confirms once its targets answered, which need not be both).
  SwarmDht *holder = nullptr;
  while (!holder && wall_ms() < grain_end - 1000) {
    for (int i : {0, 3})
      if (nodes[size_t(i)]->stored_values() == 2) holder = nodes[size_t(i)].get();
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_NE(holder, nullptr) << "neither node that put nothing came to hold both values";
  bool one_left = false;
  int64_t gone_at = 0;
  while (wall_ms() < grain_end + 2000) {
    const size_t held = holder->stored_values();
    if (held == 1) one_left = true;
    if (held == 0) {
      gone_at = wall_ms();
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_NE(gone_at, 0) << "the values outlived their grain by 2 s";
  EXPECT_FALSE(one_left) << "the two values expired apart";
  EXPECT_GE(gone_at, grain_end - 50) << "expired " << grain_end - gone_at << " ms before the grain's end";
  EXPECT_EQ(texts(nodes[0]->get(key, kOp)), std::vector<std::string>{});
}

}  // namespace
}  // namespace loom_collab
