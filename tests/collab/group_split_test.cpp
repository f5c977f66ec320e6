// SPDX-License-Identifier: Apache-2.0
// Bounded groups (group_split.h): balanced parts, every member in one, the
// same split on every member, a different one from round to round.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "../../plugins/collab_strategy/group_split.h"

namespace loom_collab {
namespace {

GroupRecord whole_of(uint32_t n, int64_t epoch, uint32_t attempt = 0) {
  GroupRecord g;
  g.fingerprint = 0x1234;
  g.epoch = epoch;
  g.attempt = attempt;
  for (uint32_t i = 0; i < n; ++i) g.members.push_back(1000 + 7919ull * i);
  g.leader = g.members.front();
  return g;
}

TEST(GroupSplit, PartsNeverHoldOnePeer) {
  EXPECT_EQ(group_parts(6, 0), 1u);   // no bound
  EXPECT_EQ(group_parts(4, 4), 1u);
  EXPECT_EQ(group_parts(5, 4), 2u);   // 3 + 2
  EXPECT_EQ(group_parts(6, 2), 3u);
  EXPECT_EQ(group_parts(3, 2), 1u);   // 2 + 1 would leave one alone
  EXPECT_EQ(group_parts(7, 2), 3u);   // 3 + 2 + 2
  EXPECT_EQ(group_parts(64, 16), 4u);
  EXPECT_EQ(group_parts(65, 16), 5u);
  EXPECT_EQ(group_parts(1, 2), 1u);
}

struct SplitCase {
  uint32_t n, target;
};
class GroupSplitSizes : public testing::TestWithParam<SplitCase> {};

TEST_P(GroupSplitSizes, BalancedCoveringAndDisjoint) {
  const auto [n, target] = GetParam();
  const GroupRecord whole = whole_of(n, 17);
  const auto parts = split_group(whole, target);
  ASSERT_EQ(parts.size(), group_parts(n, target));
  std::multiset<uint64_t> seen;
  size_t smallest = n, largest = 0;
  std::set<uint64_t> hashes{whole.group_hash()};
  for (const auto &p : parts) {
    EXPECT_TRUE(std::is_sorted(p.members.begin(), p.members.end()));
    EXPECT_GE(p.members.size(), n >= 2 ? 2u : 1u);
    if (parts.size() > 1) {
      EXPECT_LE(p.members.size(), std::max<size_t>(target, 3));
      EXPECT_EQ(p.of, n);
    }
    EXPECT_EQ(p.epoch, whole.epoch);
    EXPECT_EQ(p.leader, whole.leader);
    smallest = std::min(smallest, p.members.size());
    largest = std::max(largest, p.members.size());
    seen.insert(p.members.begin(), p.members.end());
    hashes.insert(p.group_hash());
  }
  EXPECT_LE(largest - smallest, 1u);
  EXPECT_EQ(seen, std::multiset<uint64_t>(whole.members.begin(), whole.members.end()));
  EXPECT_EQ(hashes.size(), parts.size() == 1 ? 1u : parts.size() + 1);  // parts never share a hash
}

INSTANTIATE_TEST_SUITE_P(, GroupSplitSizes,
                         testing::Values(SplitCase{2, 2}, SplitCase{3, 2}, SplitCase{6, 2}, SplitCase{7, 2},
                                         SplitCase{6, 4}, SplitCase{16, 4}, SplitCase{64, 16}, SplitCase{65, 16},
                                         SplitCase{5, 0}),
                         [](const testing::TestParamInfo<SplitCase> &i) {
                           return std::to_string(i.param.n) + "_peers_target_" + std::to_string(i.param.target);
                         });

TEST(GroupSplit, EveryMemberFindsItsOwnPartAlike) {
  const GroupRecord whole = whole_of(9, 3);
  const auto parts = split_group(whole, 3);
  for (const auto &p : parts)
    for (uint64_t m : p.members) EXPECT_EQ(part_of(whole, m, 3).members, p.members);
  EXPECT_TRUE(part_of(whole, 42, 3).members.empty());  // not a member
}

TEST(GroupSplit, TheSplitChangesFromRoundToRound) {
  // Over epochs, each peer meets most of the swarm: the information mixes.
  const uint32_t n = 16;
  std::map<uint64_t, std::set<uint64_t>> met;
  size_t same_as_before = 0;
  std::vector<GroupRecord> previous;
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    const auto parts = split_group(whole_of(n, epoch), 4);
    if (!previous.empty()) {
      for (const auto &p : parts)
        for (const auto &q : previous) same_as_before += p.members == q.members;
    }
    for (const auto &p : parts)
      for (uint64_t a : p.members) met[a].insert(p.members.begin(), p.members.end());
    previous = parts;
  }
  EXPECT_LT(same_as_before, 3u);
  for (const auto &[peer, others] : met) EXPECT_GE(others.size(), 12u) << peer;
  // A retry (the next attempt) is split afresh too.
  EXPECT_NE(split_group(whole_of(n, 5, 0), 4)[0].members, split_group(whole_of(n, 5, 1), 4)[0].members);
}

std::set<std::vector<uint64_t>> partition(const std::vector<GroupRecord> &parts) {
  std::set<std::vector<uint64_t>> out;
  for (const auto &p : parts) out.insert(p.members);
  return out;
}

struct GridCase {
  uint32_t n, target;
};
class GroupSplitGrid : public testing::TestWithParam<GridCase> {};

// With a steady membership no two consecutive epochs split alike (a
// repeated split mixes nothing), for any attempt of the later epoch.
TEST_P(GroupSplitGrid, ConsecutiveEpochsNeverSplitAlike) {
  const auto [n, target] = GetParam();
  for (int64_t epoch = 1; epoch < 400; ++epoch) {
    const auto before = partition(split_group(whole_of(n, epoch - 1), target));
    for (uint32_t attempt = 0; attempt < 2; ++attempt)
      EXPECT_NE(partition(split_group(whole_of(n, epoch, attempt), target)), before)
          << "epoch " << epoch << " attempt " << attempt;
  }
}

INSTANTIATE_TEST_SUITE_P(, GroupSplitGrid,
                         testing::Values(GridCase{4, 2}, GridCase{5, 2}, GridCase{6, 2}, GridCase{7, 3},
                                         GridCase{9, 3}, GridCase{16, 4}, GridCase{65, 16}),
                         [](const testing::TestParamInfo<GridCase> &i) {
                           return std::to_string(i.param.n) + "_peers_target_" + std::to_string(i.param.target);
                         });

// Four peers in pairs are a 2x2 grid: over an even epoch and the odd one
// after it, each peer meets two different partners, so a value every peer
// averages with its partner twice is the exact mean of the four.
TEST(GroupSplit, FourPeersInPairsHoldTheExactMeanAfterEachPairOfEpochs) {
  for (int64_t pair = 0; pair < 50; ++pair) {
    std::map<uint64_t, double> value;
    const GroupRecord first = whole_of(4, 2 * pair);
    double mean = 0;
    for (size_t i = 0; i < first.members.size(); ++i) mean += (value[first.members[i]] = double(i * i + 1)) / 4;
    for (int64_t epoch : {2 * pair, 2 * pair + 1})
      for (const auto &p : split_group(whole_of(4, epoch), 2)) {
        double sum = 0;
        for (uint64_t m : p.members) sum += value[m];
        for (uint64_t m : p.members) value[m] = sum / double(p.members.size());
      }
    for (const auto &[member, v] : value) EXPECT_DOUBLE_EQ(v, mean) << "pair " << pair << ", member " << member;
  }
}

TEST(GroupSplit, PartsTogetherBringTheTarget) {
  const GroupRecord whole = whole_of(7, 1);
  uint64_t sum = 0;
  for (const auto &p : split_group(whole, 2)) sum += part_target(256, p);
  EXPECT_GE(sum, 256u);
  EXPECT_LE(sum, 256u + 2);
  EXPECT_EQ(part_target(256, whole), 256u);  // a whole group: the whole target
}

}  // namespace
}  // namespace loom_collab
