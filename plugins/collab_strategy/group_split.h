/* SPDX-License-Identifier: Apache-2.0 */
// Bounded groups (target_group_size), after Moshpit SGD (Ryabinin et al.
// 2021): a matchmaking that gathered more peers than the target splits
// them into several groups that average apart, and the split changes from
// round to round so that what one group learnt reaches the others.
//
// The leader still closes one record listing every peer that joined
// (GroupRecord); each member then computes the same split from it, with
// no further message. Epochs go in cycles over one pseudo-random
// permutation of the members, seeded by them, the cycle and the attempt,
// as in Moshpit's d-dimensional grid: epoch j of a cycle averages along
// the grid's dimension j, so that t^d peers in groups of t hold the exact
// mean after the cycle's d epochs. Two dimensions up to t^2 peers (the
// grid's rows, consecutive runs of the order, then its columns, every
// parts-th member), one more for each further factor of t (64 peers in
// groups of 4: three). Each cycle draws afresh, so a swarm of any size
// (churn rarely fills a grid) still mixes at a geometric rate, and with a
// steady membership no two consecutive epochs split alike.
#ifndef LOOM_COLLAB_GROUP_SPLIT_H
#define LOOM_COLLAB_GROUP_SPLIT_H

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "records.h"

namespace loom_collab {

// How many parts n peers split into for target size t (t 0: no bound, one
// part): ceil(n / t), fewer when that would leave a part of one peer (only
// t = 2 and n odd), so a part never averages alone.
uint32_t group_parts(uint32_t n, uint32_t target);

// Every part of `whole` for target size t: the members of each ascending,
// sizes differing by at most one, every member in exactly one part. Each
// part is a GroupRecord of its own (its members, the whole's leader, epoch
// and attempt; `of` the whole's size), so its group_hash differs from the
// others' and from the whole's: parts never meet by mistake.
std::vector<GroupRecord> split_group(const GroupRecord &whole, uint32_t target);

// The part that holds `member` (the whole itself when it is not split);
// nullopt-like: an empty member list when `member` is not in the whole.
GroupRecord part_of(const GroupRecord &whole, uint64_t member, uint32_t target);

// The samples a part must bring: target_batch_size times its share of the
// whole (rounded up, at least 1), so that the parts together average
// target_batch_size, as one group would.
uint64_t part_target(uint64_t target_batch_size, const GroupRecord &part);

// The communicator a group may average over again (kept_comm.h): the
// round hash that every member's join named as its kept communicator
// (kept: member -> (round hash, size), from the joins), provided the group
// is not split and its size is that communicator's. Then its members are
// exactly that communicator's: each holds it, and they are as many. 0
// otherwise (a member missing from kept counts as none kept).
uint64_t kept_for(const std::vector<uint64_t> &members, const std::map<uint64_t, std::pair<uint64_t, uint32_t>> &kept,
                  uint32_t target);

}  // namespace loom_collab

#endif
