// SPDX-License-Identifier: Apache-2.0
// Where rounds' records go in the DHT (record_keys.cpp): keys namespaced by
// run, a bounded set of them reused round after round, a value id of each
// round's own, and a ttl that outlives the round.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "records.h"

namespace loom_collab {
namespace {

TEST(Records, KeysAreNamespacedByRun) {
  EXPECT_EQ(progress_key("r1"), "loom/r1/progress");
  EXPECT_EQ(join_key("r1", 12, 3), "loom/r1/join/3");  // (12 + 13 x 3) mod 16
  EXPECT_EQ(group_key("r1", 12, 3), "loom/r1/group/3");
  EXPECT_EQ(oob_key("r1", 12, 3, 5), "loom/r1/oob/19/5");  // (12 + 13 x 3) mod 32
  // The parts of one round's split spread evenly over kOobGroupKeys keys;
  // a round of one group (part 0) uses one.
  std::map<std::string, int> groups;
  for (uint32_t part = 0; part < 64; ++part) ++groups[oob_key("r1", 12, 3, part)];
  EXPECT_EQ(groups.size(), size_t(kOobGroupKeys));
  for (const auto &g : groups) EXPECT_EQ(g.second, 64 / int(kOobGroupKeys)) << g.first;
  EXPECT_EQ(oob_key("r1", 12, 3, 0), oob_key("r1", 12, 3, kOobGroupKeys));
  EXPECT_EQ(join_key("r1", 12 + 16, 3), "loom/r1/join/3");
  EXPECT_EQ(oob_key("r1", 12 + 32, 3, 5), "loom/r1/oob/19/5");
  EXPECT_NE(progress_key("r1"), progress_key("r2"));
  EXPECT_NE(join_key("r1", 12, 0), join_key("r2", 12, 0));
}

TEST(Records, RoundsReuseABoundedSetOfKeys) {
  std::set<std::string> keys;
  for (int64_t epoch = 0; epoch < 100000; ++epoch)
    for (uint32_t attempt = 0; attempt < 3; ++attempt) keys.insert(join_key("r", epoch, attempt));
  EXPECT_EQ(keys.size(), size_t(kRoundBuckets));
  std::set<std::string> oob;  // a whole group's (part 0): oob keys have buckets of their own
  for (int64_t epoch = 0; epoch < 1000; ++epoch)
    for (uint32_t attempt = 0; attempt < 3; ++attempt) oob.insert(oob_key("r", epoch, attempt, 0));
  EXPECT_EQ(oob.size(), size_t(kOobBuckets));
  // Consecutive rounds, and a round and its retry, never share a key: a
  // key is reused only kRoundBuckets rounds later.
  for (int64_t epoch = 0; epoch < 1000; ++epoch) {
    EXPECT_NE(round_bucket(epoch, 0), round_bucket(epoch + 1, 0)) << epoch;
    EXPECT_NE(round_bucket(epoch, 0), round_bucket(epoch, 1)) << epoch;
    EXPECT_EQ(round_bucket(epoch, 0), round_bucket(epoch + kRoundBuckets, 0)) << epoch;
  }
}

// A round's records go under value ids of their own (records.h: a watch
// never sees a new value under an id it has seen).
TEST(Records, EachRoundHasItsOwnValueIdPerPeer) {
  std::set<uint64_t> ids;
  for (uint64_t peer : {1ull, 2ull, 0x8000000000000000ull})
    for (int64_t epoch = 0; epoch < 600; ++epoch)
      for (uint32_t attempt = 0; attempt < 3; ++attempt) ids.insert(round_value_id(peer, epoch, attempt));
  EXPECT_EQ(ids.size(), 3u * 600u * 3u);
  EXPECT_EQ(round_value_id(7, 5, 1), round_value_id(7, 5, 1));
}

TEST(Records, ARoundsRecordsOutliveTheRound) {
  EXPECT_EQ(round_record_ttl(30.0), std::chrono::seconds(35));
  EXPECT_EQ(round_record_ttl(0.5), std::chrono::seconds(10));
  EXPECT_EQ(round_record_ttl(2.2), std::chrono::seconds(10));
  EXPECT_EQ(round_record_ttl(12.1), std::chrono::seconds(18));
  EXPECT_EQ(round_record_ttl(86400), std::chrono::seconds(600));
}

}  // namespace
}  // namespace loom_collab
