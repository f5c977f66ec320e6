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

std::vector<GroupRecord> split_group(const GroupRecord &whole, uint32_t target) {
  const uint32_t n = uint32_t(whole.members.size());
  const uint32_t parts = group_parts(n, target);
  if (parts <= 1) return {whole};
  // The whole's hash seeds the permutation: it covers the epoch, the attempt
  // and the members, so each round (and each retry) is split afresh, and
  // every member computes the same split.
  const uint64_t seed = whole.group_hash();
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (key, member)
  order.reserve(n);
  for (uint64_t m : whole.members) order.emplace_back(mix64(seed ^ mix64(m)), m);
  std::sort(order.begin(), order.end());
  std::vector<GroupRecord> out(parts);
  uint32_t at = 0;
  for (uint32_t p = 0; p < parts; ++p) {
    GroupRecord &g = out[p];
    g.fingerprint = whole.fingerprint;
    g.leader = whole.leader;
    g.epoch = whole.epoch;
    g.attempt = whole.attempt;
    g.of = n;
    const uint32_t size = n / parts + (p < n % parts ? 1 : 0);
    for (uint32_t i = 0; i < size; ++i) g.members.push_back(order[at++].second);
    std::sort(g.members.begin(), g.members.end());
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
