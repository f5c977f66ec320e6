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

// How many dimensions the grid of n peers in groups of `target` has: 2
// up to target^2 peers, one more for each further factor of target
// (Moshpit's d-dimensional grid, target^d peers holding the exact mean
// after d epochs).
uint32_t grid_dims(uint32_t n, uint32_t target) {
  const uint64_t base = std::max<uint32_t>(2, target);
  uint32_t dims = 2;
  for (uint64_t cells = base * base; cells < n; cells *= base) ++dims;
  return dims;
}

// Dimension j of a grid of `dims` dimensions in base `base`: the order
// re-sorted so that digit j of a position counts least (the others follow
// it, rotated), then cut into rows. For n = base^dims each row holds the
// peers whose positions differ in digit j alone; otherwise the rows are
// still balanced, the grid's last cells left empty.
Partition along(const std::vector<uint64_t> &order, uint32_t parts, uint32_t base, uint32_t dims, uint32_t j) {
  std::vector<uint64_t> power(dims, 1);
  for (uint32_t k = 1; k < dims; ++k) power[k] = power[k - 1] * base;
  std::vector<std::pair<uint64_t, uint64_t>> keyed;  // (rotated position, member)
  keyed.reserve(order.size());
  for (uint64_t i = 0; i < order.size(); ++i) {
    uint64_t key = 0;
    for (uint32_t k = 0; k < dims; ++k) key += (i / power[(j + k) % dims]) % base * power[k];
    keyed.emplace_back(key, order[i]);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<uint64_t> rotated;
  rotated.reserve(keyed.size());
  for (const auto &k : keyed) rotated.push_back(k.second);
  return rows(rotated, parts);
}

// The seed of cycle k (epochs k*dims to k*dims + dims - 1) at an attempt; salt: another draw.
uint64_t cycle_seed(const GroupRecord &whole, int64_t cycle, uint32_t attempt, uint64_t salt) {
  GroupRecord g = whole;
  g.epoch = cycle;
  g.attempt = attempt;
  return mix64(g.group_hash() ^ mix64(salt + 0x9e3779b97f4a7c15ULL));
}

}  // namespace

std::vector<GroupRecord> split_group(const GroupRecord &whole, uint32_t target) {
  const uint32_t n = uint32_t(whole.members.size());
  const uint32_t parts = group_parts(n, target);
  if (parts <= 1) return {whole};
  // Epochs go in cycles of `dims` over one permutation, as a Moshpit grid:
  // epoch j of a cycle averages along the grid's dimension j (two: its
  // rows, then its columns), so that four peers in pairs, or t^d peers in
  // groups of t, hold the exact mean after the cycle. Each cycle draws a
  // fresh permutation (seeded by the members, the cycle and the attempt:
  // every member computes the same, and a retry is split afresh), so
  // mixing goes on whatever the swarm's size. Each epoch's split also
  // differs from the one before it and the cycle's last from the next
  // cycle's first (another draw where they match), so with a steady
  // membership no two consecutive epochs split alike: a repeated split
  // mixes nothing, and two in a row at a run's end left groups of
  // local-update peers 0.013 apart.
  const uint32_t dims = grid_dims(n, target), base = std::max<uint32_t>(2, target);
  const int64_t epoch = std::max<int64_t>(0, whole.epoch), cycle = epoch / dims;
  const uint32_t phase = uint32_t(epoch % dims);
  auto draw = [&](int64_t k, uint32_t attempt, uint64_t salt) {
    return permuted(whole.members, cycle_seed(whole, k, attempt, salt));
  };
  auto cut = [&](const std::vector<uint64_t> &order, uint32_t j) {
    if (j == 0) return rows(order, parts);
    return dims == 2 ? columns(order, parts) : along(order, parts, base, dims, j);
  };
  // Another draw of rows until the split differs from each of `others`.
  auto unlike = [&](Partition split, const std::vector<const Partition *> &others, int64_t k, uint32_t attempt) {
    auto clash = [&] {
      return std::any_of(others.begin(), others.end(), [&](const Partition *o) { return *o == split; });
    };
    for (uint64_t salt = 1; salt <= 64 && clash(); ++salt) split = rows(draw(k, attempt, salt), parts);
    return split;
  };
  // Cycle k's splits at attempt 0, epochs 0 to `upto` of it: the first
  // never draws again (so the others compare with fixed splits); each
  // other one differs from the one before, the last also from the next
  // cycle's first.
  auto cycle_splits = [&](int64_t k, uint32_t upto) {
    const std::vector<uint64_t> order = draw(k, 0, 0);
    std::vector<Partition> out{rows(order, parts)};
    const Partition next = upto + 1 == dims ? rows(draw(k + 1, 0, 0), parts) : Partition{};
    for (uint32_t j = 1; j <= upto; ++j) {
      std::vector<const Partition *> others{&out.back()};
      if (j + 1 == dims) others.push_back(&next);
      out.push_back(unlike(cut(order, j), others, k, 0));
    }
    return out;
  };
  Partition chosen;
  if (whole.attempt == 0) {
    chosen = std::move(cycle_splits(cycle, phase).back());
  } else {
    // A retry draws afresh; it must still differ from the epoch before
    // (and, the cycle's last, from the next cycle's first).
    Partition before, next;
    std::vector<const Partition *> others;
    if (phase > 0) before = std::move(cycle_splits(cycle, phase - 1).back());
    else if (cycle > 0) before = std::move(cycle_splits(cycle - 1, dims - 1).back());
    if (phase > 0 || cycle > 0) others.push_back(&before);
    if (phase + 1 == dims) {
      next = rows(draw(cycle + 1, 0, 0), parts);
      others.push_back(&next);
    }
    chosen = unlike(cut(draw(cycle, whole.attempt, 0), phase), others, cycle, whole.attempt);
  }
  // Each part is the whole with its own members: the leader (every part's
  // hub, oob_hub.h), the round and the fingerprint carry over. A split
  // group never reuses a communicator (kept_for).
  std::vector<GroupRecord> out(parts, whole);
  for (uint32_t p = 0; p < parts; ++p) {
    GroupRecord &g = out[p];
    g.reuse = 0;
    g.of = n;
    g.part = p;
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

uint64_t kept_for(const std::vector<uint64_t> &members, const std::map<uint64_t, std::pair<uint64_t, uint32_t>> &kept,
                  uint32_t target) {
  if (members.size() < 2 || group_parts(uint32_t(members.size()), target) != 1) return 0;
  uint64_t id = 0;
  for (uint64_t m : members) {
    const auto it = kept.find(m);
    if (it == kept.end() || it->second.first == 0 || it->second.second != members.size()) return 0;
    if (id != 0 && it->second.first != id) return 0;
    id = it->second.first;
  }
  return id;
}

}  // namespace loom_collab
