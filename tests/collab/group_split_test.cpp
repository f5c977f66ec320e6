// SPDX-License-Identifier: Apache-2.0
// Bounded groups (group_split.h): balanced parts, every member in one, the
// same split on every member, a different one from round to round.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
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
void PrintTo(const SplitCase &c, std::ostream *os) { *os << c.n << " peers, target " << c.target; }
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
  GroupRecord whole = whole_of(9, 3);
  whole.hub_host = "10.0.0.1";
  whole.hub_port = 4000;
  const auto parts = split_group(whole, 3);
  ASSERT_EQ(parts.size(), 3u);
  for (uint32_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].part, i);  // the index that picks the part's oob key
    // The leader is every part's hub, a member of that part or not.
    EXPECT_EQ(parts[i].hub_host, whole.hub_host);
    EXPECT_EQ(parts[i].hub_port, whole.hub_port);
    EXPECT_EQ(parts[i].leader, whole.leader);
    for (uint64_t m : parts[i].members) {
      EXPECT_EQ(part_of(whole, m, 3).members, parts[i].members);
      EXPECT_EQ(part_of(whole, m, 3).part, i);
    }
  }
  EXPECT_TRUE(part_of(whole, 42, 3).members.empty());  // not a member
  EXPECT_EQ(part_of(whole, whole.members[0], 0).part, 0u);  // unsplit: one oob key
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
void PrintTo(const GridCase &c, std::ostream *os) { *os << c.n << " peers, target " << c.target; }
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
                                         GridCase{9, 3}, GridCase{16, 4}, GridCase{65, 16}, GridCase{8, 2},
                                         GridCase{10, 3}, GridCase{16, 2}, GridCase{27, 3}, GridCase{33, 2},
                                         GridCase{64, 4}, GridCase{100, 4}),
                         [](const testing::TestParamInfo<GridCase> &i) {
                           return std::to_string(i.param.n) + "_peers_target_" + std::to_string(i.param.target);
                         });

// t^d peers in groups of t are a d-dimensional grid: over the d epochs
// of a cycle each peer averages along every dimension once, so a value
// that every group replaces by its mean is the exact mean of all of them.
// (A cycle whose last split would match the next cycle's first draws that
// split again, and is then not a grid: none of these 50 cycles does for
// these members, and for 4 peers in pairs any other split is the grid's.)
struct ExactCase {
  uint32_t n, target, dims;
};
void PrintTo(const ExactCase &c, std::ostream *os) {
  *os << c.n << " peers in groups of " << c.target << ", " << c.dims << " dimensions";
}
class GroupSplitExact : public testing::TestWithParam<ExactCase> {};

TEST_P(GroupSplitExact, PeersHoldTheExactMeanAfterEachCycle) {
  const auto [n, target, dims] = GetParam();
  for (int64_t cycle = 0; cycle < 50; ++cycle) {
    std::map<uint64_t, double> value;
    const GroupRecord first = whole_of(n, dims * cycle);
    double mean = 0;
    for (size_t i = 0; i < n; ++i) mean += (value[first.members[i]] = double(i * i + 1)) / n;
    for (uint32_t j = 0; j < dims; ++j)
      for (const auto &p : split_group(whole_of(n, dims * cycle + j), target)) {
        ASSERT_EQ(p.members.size(), target);
        double sum = 0;
        for (uint64_t m : p.members) sum += value[m];
        for (uint64_t m : p.members) value[m] = sum / double(p.members.size());
      }
    for (const auto &[member, v] : value) EXPECT_NEAR(v, mean, 1e-9 * mean) << "cycle " << cycle << ", member " << member;
  }
}

INSTANTIATE_TEST_SUITE_P(, GroupSplitExact,
                         testing::Values(ExactCase{4, 2, 2}, ExactCase{9, 3, 2}, ExactCase{8, 2, 3},
                                         ExactCase{16, 2, 4}, ExactCase{27, 3, 3}, ExactCase{64, 4, 3},
                                         ExactCase{256, 16, 2}),
                         [](const testing::TestParamInfo<ExactCase> &i) {
                           return std::to_string(i.param.n) + "_peers_in_groups_of_" + std::to_string(i.param.target);
                         });

// A swarm that fills no grid still mixes geometrically: over 12 epochs of
// groups replacing values by their mean, the variance across peers falls
// by 10^5 at least (mean of log10 over 20 memberships). Pairs of rows and
// columns alone (protocol 3) left 33 peers in pairs at 10^-4.4 (a Python
// model of both, 200 draws); the grid of 6 dimensions reaches 10^-7.3.
class GroupSplitMixing : public testing::TestWithParam<GridCase> {};

TEST_P(GroupSplitMixing, TwelveEpochsCutTheVarianceByTenToTheFifth) {
  const auto [n, target] = GetParam();
  double log_ratio = 0;
  constexpr int kMemberships = 20;
  for (int set = 0; set < kMemberships; ++set) {
    auto whole = [&](int64_t epoch) {
      GroupRecord g = whole_of(n, epoch);
      g.fingerprint = 0x1234 + uint64_t(set);
      return g;
    };
    std::map<uint64_t, double> value;
    double mean = 0;
    for (uint32_t i = 0; i < n; ++i) mean += (value[whole(0).members[i]] = double((i * 37 + set * 11) % 101)) / n;
    auto variance = [&] {
      double v = 0;
      for (const auto &[m, x] : value) v += (x - mean) * (x - mean) / n;
      return v;
    };
    const double before = variance();
    for (int64_t epoch = 0; epoch < 12; ++epoch)
      for (const auto &p : split_group(whole(epoch), target)) {
        double sum = 0;
        for (uint64_t m : p.members) sum += value[m];
        for (uint64_t m : p.members) value[m] = sum / double(p.members.size());
      }
    log_ratio += std::log10(std::max(1e-300, variance() / before)) / kMemberships;
  }
  std::printf("[ figures  ] %u peers in groups of %u: variance x10^%.1f after 12 epochs\n", n, target, log_ratio);
  EXPECT_LE(log_ratio, -5.0);
}

INSTANTIATE_TEST_SUITE_P(, GroupSplitMixing,
                         testing::Values(GridCase{6, 2}, GridCase{10, 3}, GridCase{33, 2}, GridCase{50, 4},
                                         GridCase{100, 4}, GridCase{130, 4}),
                         [](const testing::TestParamInfo<GridCase> &i) {
                           return std::to_string(i.param.n) + "_peers_target_" + std::to_string(i.param.target);
                         });

TEST(GroupSplit, PartsTogetherBringTheTarget) {
  const GroupRecord whole = whole_of(7, 1);
  uint64_t sum = 0;
  for (const auto &p : split_group(whole, 2)) sum += part_target(256, p);
  EXPECT_GE(sum, 256u);
  EXPECT_LE(sum, 256u + 2);
  EXPECT_EQ(part_target(256, whole), 256u);  // a whole group: the whole target
}

// The leader's choice of a kept communicator (kept_comm.h): only the one
// every member named, over exactly as many members, in a group not split.
TEST(GroupSplit, AGroupReusesACommunicatorOnlyWhereEveryMemberKeptTheSameOne) {
  const std::vector<uint64_t> members{3, 5, 9, 11};
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> kept{{3, {77, 4}}, {5, {77, 4}}, {9, {77, 4}}, {11, {77, 4}}};
  EXPECT_EQ(kept_for(members, kept, 0), 77u);
  EXPECT_EQ(kept_for(members, kept, 4), 77u);  // under target_group_size, not split
  EXPECT_EQ(kept_for(members, kept, 2), 0u) << "a split group's parts build their own";
  auto with = [&](uint64_t peer, uint64_t round, uint32_t size) {
    auto k = kept;
    k[peer] = {round, size};
    return kept_for(members, k, 0);
  };
  EXPECT_EQ(with(9, 78, 4), 0u) << "one member kept another round's";
  EXPECT_EQ(with(9, 0, 0), 0u) << "one member kept none";
  // All four name it but it held five: the fifth is not here, so these
  // four are not its members at its ranks.
  auto five = kept;
  for (auto &k : five) k.second.second = 5;
  EXPECT_EQ(kept_for(members, five, 0), 0u);
  auto missing = kept;
  missing.erase(5);  // its join was not read
  EXPECT_EQ(kept_for(members, missing, 0), 0u);
  EXPECT_EQ(kept_for({3}, {{3, {77, 1}}}, 0), 0u) << "alone: no communicator";
}

}  // namespace
}  // namespace loom_collab
