#include "state_check.h"

#include <cinttypes>
#include <cstdio>

namespace loom_collab {
namespace {

std::string hex64(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016" PRIx64, v);
  return text;
}

}  // namespace

Judgement judge(const StateCheck &c) {
  const std::string of = "the state of epoch " + std::to_string(c.epoch) + " from peer " + std::to_string(c.donor);
  const SyncVotes &v = c.votes;
  if (c.others_top >= 0 && c.epoch > c.others_top + c.every)
    return {Verdict::refuse, of + " cannot be checked: it claims an epoch ahead of every other peer (the furthest is at " +
                                 std::to_string(c.others_top) + ")"};
  auto tally = [&](uint64_t hash) {
    return std::to_string(v.count(hash)) + " of " + std::to_string(v.others + 1) + " peers";
  };
  if (auto w = v.winner()) {
    if (*w != c.digest)
      return {Verdict::refuse, of + " does not match the parameters' hash that " + tally(*w) +
                                   " published for that epoch (" + hex64(c.digest) + ", not " + hex64(*w) +
                                   "): a poisoned or damaged state"};
    return {Verdict::keep, of + " matches the parameters' hash that " + tally(*w) + " published"};
  }
  if (v.others_reached < v.others) {
    if (!c.out_of_time) return {Verdict::wait, ""};
    return {Verdict::refuse,
            of + " cannot be checked: the other peers that publish parameters' hashes did not reach that epoch in time"};
  }
  return {Verdict::trust,
          of + " could not be checked: " +
              (v.others == 0 ? std::string("no other healthy peer publishes parameters' hashes")
                             : "the " + std::to_string(v.others + 1) +
                                   " peers that publish parameters' hashes do not agree on one for that epoch") +
              "; it is taken on trust"};
}

}  // namespace loom_collab
