// SPDX-License-Identifier: Apache-2.0
// Sampled progress (progress_shards.h): the level arithmetic, the rule that
// a writer reaches every reader whose estimate is close to its own, and
// swarms of 5 to 2,000 peers simulated in memory (a map stands for the DHT)
// that grow, settle on one level, estimate their size, take in a joiner and
// read a bounded number of records whatever their size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "progress_shards.h"
#include "records.h"
#include "tracker.h"

namespace loom_collab {
namespace {

constexpr uint64_t kPer = 8;  // a quarter of the default: more levels within the sizes simulated

TEST(ProgressShards, LevelsDoubleWithTheSwarmAndStopAtTheCap) {
  EXPECT_EQ(shard_level(1, kPer), 0);
  EXPECT_EQ(shard_level(15, kPer), 0);
  EXPECT_EQ(shard_level(16, kPer), 1);
  EXPECT_EQ(shard_level(64, kPer), 3);
  EXPECT_EQ(shard_level(1000, kPer), 6);
  EXPECT_EQ(shard_level(1e12, kPer), kMaxShardLevel);
  EXPECT_EQ(write_levels(1e12, kPer), std::vector<int>{kMaxShardLevel});
  EXPECT_EQ(shard_level(0, kPer), 0);
  EXPECT_EQ(shard_level(std::nan(""), kPer), 0);
  EXPECT_EQ(write_levels(6, kPer), std::vector<int>{0});              // a small swarm: one key, as ever
  EXPECT_EQ(write_levels(12, kPer), (std::vector<int>{0, 1}));        // near a boundary: both sides
  // A reader's range spans more than a level (hysteresis), so most writers
  // put on two levels, never more than three.
  EXPECT_EQ(write_levels(1000, kPer), (std::vector<int>{6, 7}));
  for (double n = 1; n < 1e6; n *= 1.05) EXPECT_LE(write_levels(n, kPer).size(), 3u) << n;
  EXPECT_EQ(progress_shard_key("r", 0, 0), progress_key("r"));
  EXPECT_NE(progress_shard_key("r", 1, 0), progress_shard_key("r", 2, 0));
}

TEST(ProgressShards, ShardsNestAndSpreadIdsEvenly) {
  std::mt19937_64 rng(7);
  std::vector<int> count(16);
  for (int i = 0; i < 16000; ++i) {
    const uint64_t id = rng();
    EXPECT_EQ(shard_of(id, 0), 0u);
    ASSERT_LT(shard_of(id, 4), 16u);
    EXPECT_EQ(shard_of(id, 5) >> 1, shard_of(id, 4));  // a shard's peers one level up are half of it
    ++count[shard_of(id, 4)];
  }
  for (int c : count) EXPECT_NEAR(c, 1000, 150);
  // Consecutive ids (how a test might mint them) spread too.
  std::set<uint32_t> used;
  for (uint64_t id = 1; id <= 64; ++id) used.insert(shard_of(id, 3));
  EXPECT_EQ(used.size(), 8u);
}

// A reader at level L keeps it while its estimate r is within
// [per * 2^L / 1.2, 2 * per * 2^L * 1.2); every writer whose estimate is
// within a factor 1.25 of r must put its record on L.
TEST(ProgressShards, AWriterReachesEveryReaderWhoseEstimateIsWithinAQuarterOfItsOwn) {
  for (uint64_t per : {uint64_t(1), uint64_t(2), kPer, uint64_t(100)}) {
    for (double r = 1; r < 1e6; r *= 1.01) {
      for (int level = 0; level <= kMaxShardLevel; ++level) {
        const double low = level == 0 ? 0 : std::ldexp(double(per), level) / 1.2;
        const double high = level == kMaxShardLevel ? INFINITY : std::ldexp(2.0 * double(per), level) * 1.2;
        if (r < low || r >= high) continue;
        for (double f : {0.8, 0.9, 1.0, 1.1, 1.25}) {
          const auto w = write_levels(r * f, per);
          ASSERT_TRUE(std::find(w.begin(), w.end(), level) != w.end())
              << "per_shard " << per << ": a reader at level " << level << " with estimate " << r
              << " misses a writer with estimate " << r * f;
        }
      }
    }
  }
}

// The DHT as a map: key -> peer -> the time its record was put.
struct SimSwarm {
  std::map<std::string, std::map<uint64_t, int64_t>> keys;
  std::vector<uint64_t> ids;
  std::vector<ShardPlan> plans;
  std::vector<double> estimate;
  int64_t now = 1'000'000;
  uint64_t max_records_per_read = 0, records_read = 0, reads = 0;
  std::set<size_t> blind;  // peers whose reads come back empty (failed, or every record past the horizon)
  std::mt19937_64 rng{11};

  void add(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      ids.push_back(rng());
      plans.emplace_back(ids.back(), kPer);
      estimate.push_back(1);
    }
  }
  uint64_t live_others(const std::string &key, uint64_t me) const {
    auto it = keys.find(key);
    if (it == keys.end()) return 0;
    uint64_t n = 0;
    for (const auto &[id, at] : it->second) n += id != me && now - at <= 5000;
    return n;
  }
  // Every peer puts its record, then reads: one background pass, 250 ms.
  void pass() {
    now += 250;
    for (size_t i = 0; i < ids.size(); ++i)
      for (int level : plans[i].levels_to_write(estimate[i]))
        keys[progress_shard_key("sim", level, shard_of(ids[i], level))][ids[i]] = now;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int level = plans[i].level();
      uint64_t read = 0;
      for (uint32_t shard : plans[i].next_reads()) {
        const uint64_t n = blind.count(i) ? 0 : live_others(progress_shard_key("sim", level, shard), ids[i]);
        read += n;
        plans[i].saw(level, shard, n, now);
      }
      for (int probe : plans[i].next_probes()) {
        const uint32_t shard = shard_of(ids[i], probe);
        plans[i].saw(probe, shard, blind.count(i) ? 0 : live_others(progress_shard_key("sim", probe, shard), ids[i]),
                     now);
      }
      max_records_per_read = std::max(max_records_per_read, read);
      records_read += read;
      ++reads;
      estimate[i] = plans[i].peers(now, 5000);
    }
  }
  std::set<int> levels() const {
    std::set<int> out;
    for (const auto &p : plans) out.insert(p.level());
    return out;
  }
};

class SimulatedSwarm : public ::testing::TestWithParam<size_t> {};

TEST_P(SimulatedSwarm, GrowsSettlesOnOneLevelAndEstimatesItsSize) {
  const size_t n = GetParam();
  SimSwarm s;
  s.add(2);
  while (s.ids.size() < n) {  // peers join a few at a time, a pass apart
    s.add(std::min<size_t>(n - s.ids.size(), std::max<size_t>(1, s.ids.size() / 8)));
    s.pass();
  }
  const uint64_t growing = s.max_records_per_read;
  s.max_records_per_read = s.records_read = s.reads = 0;
  for (int i = 0; i < 40; ++i) s.pass();  // ten seconds
  if (getenv("SIM_DEBUG")) {
    std::map<int, std::vector<double>> by;
    for (size_t i = 0; i < n; ++i) by[s.plans[i].level()].push_back(s.estimate[i]);
    for (auto &[l, e] : by) {
      std::sort(e.begin(), e.end());
      printf("level %d: %zu peers, estimates %.0f .. %.0f median %.0f\n", l, e.size(), e.front(), e.back(), e[e.size()/2]);
    }
    printf("max records per read growing %llu settled %llu, mean %.1f\n", (unsigned long long)growing,
           (unsigned long long)s.max_records_per_read, double(s.records_read) / double(s.reads));
  }
  const int expected = shard_level(double(n), kPer);
  for (size_t i = 0; i < n; ++i) {
    const int level = s.plans[i].level();
    EXPECT_LE(std::abs(level - expected), 1) << "peer " << i << " of " << n;
    EXPECT_NEAR(s.estimate[i], double(n), 0.35 * double(n) + 1) << "peer " << i << " of " << n << " at level " << level;
  }
  // What a read costs does not grow with the swarm: two keys of per_shard
  // to 2 * per_shard records each on average (1.2 times more before their
  // readers move up), more now and then by chance.
  EXPECT_LE(double(s.records_read) / double(s.reads), 5.0 * kPer) << n << " peers";
  EXPECT_LE(s.max_records_per_read, 10 * kPer) << n << " peers";
  EXPECT_LE(growing, 10 * kPer) << n << " peers, while they joined";
  if (n <= kPer) {
    EXPECT_EQ(s.levels(), std::set<int>{0}) << "a small swarm keeps one key";
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SimulatedSwarm, ::testing::Values(5, 16, 40, 300, 2000),
                         [](const auto &info) { return std::to_string(info.param) + "Peers"; });

TEST(ProgressShards, AJoinerOfALargeSwarmClimbsToItsLevelWithinAFewReads) {
  SimSwarm s;
  s.add(300);
  for (int i = 0; i < 60; ++i) s.pass();
  const int level = s.plans[0].level();
  ASSERT_GE(level, 4);
  s.add(1);  // starts at level 0, which is empty in a swarm this size
  int passes = 0;
  while (s.plans.back().level() < level - 1 && passes < 40) {
    s.pass();
    ++passes;
  }
  EXPECT_LE(passes, 2) << "the joiner's first read looks at every level";
  for (int i = 0; i < 20; ++i) s.pass();
  EXPECT_NEAR(s.estimate.back(), 301, 0.35 * 301);
}

TEST(ProgressShards, ASwarmThatShrinksComesBackToOneKey) {
  SimSwarm s;
  s.add(100);
  for (int i = 0; i < 40; ++i) s.pass();
  ASSERT_GE(*s.levels().begin(), 2);
  while (s.ids.size() > 4) {  // peers leave; their records expire
    s.ids.pop_back();
    s.plans.pop_back();
    s.estimate.pop_back();
    if (s.ids.size() % 8 == 0) s.pass();
  }
  for (int i = 0; i < 60; ++i) s.pass();
  EXPECT_EQ(s.levels(), std::set<int>{0});
  for (double e : s.estimate) EXPECT_EQ(e, 4.0);
}

// Reads that come back empty drop a peer's estimate, and its level with
// it, to where the others no longer write: it must climb back at once, not
// when its turn of probes comes round (64-peer run 27: a minute alone).
TEST(ProgressShards, APeerWhoseReadsCameBackEmptyClimbsBackToItsLevel) {
  for (const bool blind_probe : {false, true}) {
    SimSwarm s;
    s.add(64);
    for (int i = 0; i < 40; ++i) s.pass();
    const int level = s.plans[0].level();
    ASSERT_GE(level, 2);
    s.blind.insert(0);
    // A few seconds of empty reads move nothing (ShardPlan::kFallAfterMs).
    for (int i = 0; i < 32; ++i) s.pass();
    ASSERT_EQ(s.plans[0].level(), level) << "8 s of empty reads";
    int passes = 0;
    while (s.plans[0].level() != 0 && passes++ < 40) s.pass();
    ASSERT_EQ(s.plans[0].level(), 0) << "empty reads for long say the swarm is this peer alone";
    if (blind_probe) s.pass();  // the probes right after the fall come back empty too
    s.blind.clear();
    passes = 0;
    while (s.plans[0].level() < level - 1 && passes < 40) {
      s.pass();
      ++passes;
    }
    // Right after the fall, every level above is probed; a peer that then
    // sees nobody probes them all again every kProbeEvery-th read.
    EXPECT_LE(passes, blind_probe ? int(ShardPlan::kProbeEvery) + 1 : 1) << (blind_probe ? "probes missed" : "");
    for (int i = 0; i < 20; ++i) s.pass();
    EXPECT_NEAR(s.estimate[0], 64, 0.35 * 64);
  }
}

TEST(ProgressShards, ASampledViewScalesTheSampleToTheEstimatedSwarm) {
  Tracker t(5000);
  const int64_t now = 1'000'000;
  std::vector<uint64_t> fresh;
  for (uint64_t id = 2; id < 32; ++id) {  // 30 records known, 10 of them from the latest read
    ProgressRecord r;
    r.peer_id = id;
    r.epoch = 3;
    r.samples = 10;
    r.samples_per_second = 2;
    r.time_ms = now;
    t.merge(r);
    if (id < 12) fresh.push_back(id);
  }
  SampledProgress sample{fresh, 100};
  SwarmView v = t.view(1, 3, 5, 1, now, 0, &sample);
  EXPECT_EQ(v.peers, 100u);
  EXPECT_EQ(v.samples, 5u + 990u);  // 99 others like the 10 read
  EXPECT_DOUBLE_EQ(v.rate, 1 + 99 * 2.0);
  EXPECT_EQ(v.others.size(), 30u);  // who to expect and load from: every live record known
  SwarmView whole = t.view(1, 3, 5, 1, now);
  EXPECT_EQ(whole.peers, 31u);
  EXPECT_EQ(whole.samples, 5u + 300u);
  SampledProgress empty{{}, 100};  // nothing read: only this peer's own
  EXPECT_EQ(t.view(1, 3, 5, 1, now, 0, &empty).samples, 5u);
}

}  // namespace
}  // namespace loom_collab
