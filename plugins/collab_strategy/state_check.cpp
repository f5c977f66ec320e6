// SPDX-License-Identifier: Apache-2.0
#include "state_check.h"

namespace loom_collab {

Judgement judge(const StateCheck &c) {
  const std::string of = "the state of epoch " + std::to_string(c.epoch) + " from peer " + std::to_string(c.donor);
  const SyncVotes &v = c.votes;
  const bool ahead = c.others_top >= 0 && c.epoch > c.others_top + c.every;
  if (ahead && (c.others_fresh || c.out_of_time))
    return {Verdict::refuse, of + " cannot be checked: it claims an epoch ahead of every other peer (the furthest is at " +
                                 std::to_string(c.others_top) + ")"};
  auto tally = [&](uint64_t hash) {
    return std::to_string(v.count(hash)) + " of the " + std::to_string(v.others) + " other peers";
  };
  auto mismatch = [&](uint64_t theirs) {
    return Judgement{Verdict::refuse, of + " does not match the parameters' hash that " + tally(theirs) +
                                          " published for that epoch (" + hex64(c.digest) + ", not " + hex64(theirs) +
                                          "): a poisoned or damaged state"};
  };
  if (c.bounded) {
    if (v.count(c.digest) > 0)
      return {Verdict::keep, of + " matches the parameters' hash that " + tally(c.digest) +
                                 " published (the donor's group; groups are bounded by target_group_size)"};
    if (auto it = v.vouchers.find(c.digest); it != v.vouchers.end() && it->second > 0)
      return {Verdict::keep, of + " matches the parameters' hash that " + std::to_string(it->second) +
                                 " other peers published in records older than the live horizon (the donor's "
                                 "group; groups are bounded by target_group_size)"};
    if (ahead) return {Verdict::wait, ""};
    if (v.others_reached < v.others && !c.out_of_time) return {Verdict::wait, ""};
    if (v.others == 0)
      return {Verdict::trust, of + " could not be checked: no other healthy peer publishes parameters' hashes; it "
                                   "is taken on trust"};
    return {Verdict::refuse, of + " does not match any parameters' hash the other peers published for that epoch (" +
                                 hex64(c.digest) + "; no member of the donor's group vouches for it): a poisoned "
                                 "or damaged state"};
  }
  if (auto m = v.majority()) {
    if (*m != c.digest) return mismatch(*m);
    return {Verdict::keep, of + " matches the parameters' hash that " + tally(*m) + " published"};
  }
  if (ahead) return {Verdict::wait, ""};
  if (v.others_reached < v.others && !c.out_of_time) return {Verdict::wait, ""};
  if (v.others == 0)
    return {Verdict::trust, of + " could not be checked: no other healthy peer publishes parameters' hashes; it is "
                                 "taken on trust"};
  if (v.votes.empty())
    return {Verdict::refuse, of + " cannot be checked: none of the " + std::to_string(v.others) +
                                 " other peers that publish parameters' hashes published one for that epoch in time"};
  if (auto lead = v.leader()) {
    if (*lead != c.digest) return mismatch(*lead);
    return {Verdict::keep, of + " matches the parameters' hash that " + tally(*lead) + " published (the most)"};
  }
  if (v.count(c.digest) == 0) {
    return {Verdict::refuse, of + " does not match any parameters' hash the other peers published for that epoch (" +
                                 hex64(c.digest) + "): a poisoned or damaged state"};
  }
  return {Verdict::trust, of + " could not be checked: the other peers that publish parameters' hashes are split "
                               "between it and others for that epoch; it is taken on trust"};
}

}  // namespace loom_collab
