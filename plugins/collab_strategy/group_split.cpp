// SPDX-License-Identifier: Apache-2.0
#include "group_split.h"

#include <algorithm>
#include <utility>

namespace loom_collab {

uint32_t group_parts(uint32_t n, uint32_t target) {
  if (target == 0 || n <= target) return 1;
  uint32_t parts = (n + target - 1) / target;
  if (n / parts < 2) parts = n / 2;  // no part of one peer
  return std::max<uint32_t>(1, parts);
}

namespace {

using Partition = std::vector<std::vector<uint64_t>>;  // parts, each ascending; parts by first member

// The members in the order of a permutation drawn from seed.
std::vector<uint64_t> permuted(const std::vector<uint64_t> &members, uint64_t seed) {
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (key, member)
  order.reserve(members.size());
  for (uint64_t m : members) order.emplace_back(mix64(seed ^ mix64(m)), m);
  std::sort(order.begin(), order.end());
  std::vector<uint64_t> out;
  out.reserve(order.size());
  for (const auto &o : order) out.push_back(o.second);
  return out;
}

Partition canonical(Partition p) {
  for (auto &part : p) std::sort(part.begin(), part.end());
  std::sort(p.begin(), p.end());
  return p;
}

// The grid's rows: consecutive runs of the order, sizes differing by at most one.
Partition rows(const std::vector<uint64_t> &order, uint32_t parts) {
  const uint32_t n = uint32_t(order.size());
  Partition out(parts);
  uint32_t at = 0;
  for (uint32_t p = 0; p < parts; ++p) {
    const uint32_t size = n / parts + (p < n % parts ? 1 : 0);
    for (uint32_t i = 0; i < size; ++i) out[p].push_back(order[at++]);
  }
  return canonical(std::move(out));
}

// The grid's columns: every parts-th member of the order. No two neighbours
// of a row share a column, so rows and columns of one order always differ
// (every part holds two or more).
Partition columns(const std::vector<uint64_t> &order, uint32_t parts) {
  Partition out(parts);
  for (size_t i = 0; i < order.size(); ++i) out[i % parts].push_back(order[i]);
  return canonical(std::move(out));
}

// The seed of pair k (epochs 2k and 2k+1) at an attempt; salt: another draw.
uint64_t pair_seed(const GroupRecord &whole, int64_t pair, uint32_t attempt, uint64_t salt) {
  GroupRecord g = whole;
  g.epoch = pair;
  g.attempt = attempt;
  return mix64(g.group_hash() ^ mix64(salt + 0x9e3779b97f4a7c15ULL));
}

}  // namespace

std::vector<GroupRecord> split_group(const GroupRecord &whole, uint32_t target) {
  const uint32_t n = uint32_t(whole.members.size());
  const uint32_t parts = group_parts(n, target);
  if (parts <= 1) return {whole};
  // Epochs go in pairs over one permutation, as a two-dimensional Moshpit
  // grid: the even epoch averages its rows, the odd one its columns, so
  // that four peers in pairs (or s*s in groups of s) hold the exact mean
  // after the two. Each pair draws a fresh permutation (seeded by the
  // members, the pair and the attempt: every member computes the same, and
  // a retry is split afresh), so mixing goes on whatever the swarm's size.
  // An odd epoch's split also differs from the next pair's rows (another
  // draw where they match), so with a steady membership no two consecutive
  // epochs split alike: a repeated split mixes nothing, and two in a row
  // at a run's end left groups of local-update peers 0.013 apart.
  const int64_t epoch = std::max<int64_t>(0, whole.epoch), pair = epoch / 2;
  auto draw = [&](int64_t k, uint32_t attempt, uint64_t salt) {
    return permuted(whole.members, pair_seed(whole, k, attempt, salt));
  };
  // Another draw of rows until the split differs from each of `others`.
  auto unlike = [&](Partition split, const std::vector<const Partition *> &others, int64_t k, uint32_t attempt) {
    auto clash = [&] {
      return std::any_of(others.begin(), others.end(), [&](const Partition *o) { return *o == split; });
    };
    for (uint64_t salt = 1; salt <= 64 && clash(); ++salt) split = rows(draw(k, attempt, salt), parts);
    return split;
  };
  // The odd epoch of pair k at an attempt: the columns of the pair's order,
  // unlike its own rows and the next pair's (both taken at attempt 0).
  auto odd = [&](int64_t k, uint32_t attempt) {
    const Partition before = rows(draw(k, 0, 0), parts), after = rows(draw(k + 1, 0, 0), parts);
    return unlike(columns(draw(k, attempt, 0), parts), {&before, &after}, k, attempt);
  };
  Partition chosen;
  if (epoch % 2 == 1) {
    chosen = odd(pair, whole.attempt);
  } else {
    chosen = rows(draw(pair, whole.attempt, 0), parts);
    // A retry draws afresh; it must still differ from the epoch before.
    if (whole.attempt > 0 && pair > 0) {
      const Partition before = odd(pair - 1, 0);
      chosen = unlike(std::move(chosen), {&before}, pair, whole.attempt);
    }
  }
  std::vector<GroupRecord> out(parts);
  for (uint32_t p = 0; p < parts; ++p) {
    GroupRecord &g = out[p];
    g.fingerprint = whole.fingerprint;
    g.leader = whole.leader;
    g.epoch = whole.epoch;
    g.attempt = whole.attempt;
    g.of = n;
    g.members = std::move(chosen[p]);
  }
  return out;
}

GroupRecord part_of(const GroupRecord &whole, uint64_t member, uint32_t target) {
  for (auto &part : split_group(whole, target))
    if (std::binary_search(part.members.begin(), part.members.end(), member)) return part;
  GroupRecord none = whole;
  none.members.clear();
  return none;
}

uint64_t part_target(uint64_t target_batch_size, const GroupRecord &part) {
  const uint64_t size = part.members.size();
  if (part.of == 0 || part.of <= size) return target_batch_size;
  return std::max<uint64_t>(1, (target_batch_size * size + part.of - 1) / part.of);
}

}  // namespace loom_collab
