/* SPDX-License-Identifier: Apache-2.0 */
// Whether a joiner keeps a donor's state, judged from what it restored (its
// parameters' digest) and what the other peers published for that epoch
// (tracker.h's SyncVotes). Pure, so every branch is tested on its own; the
// peer (sync_state.cpp) asks again while the verdict is wait.
#ifndef LOOM_COLLAB_STATE_CHECK_H
#define LOOM_COLLAB_STATE_CHECK_H

#include <cstdint>
#include <string>

#include "tracker.h"

namespace loom_collab {

enum class Verdict {
  keep,    // its digest is the one most peers published for that epoch
  refuse,  // poisoned, damaged, or a claim nobody can vouch for in time
  trust,   // nothing to check it against (no other healthy peer publishes, or they are split evenly): kept, with a warning
  wait,    // the others have not published for that epoch yet: ask again
};

struct StateCheck {
  int64_t epoch = 0;        // of the state the donor sent
  uint64_t donor = 0;
  uint64_t digest = 0;      // of the parameters restored from it
  SyncVotes votes;          // for epoch, others besides the donor
  int64_t others_top = -1;  // the furthest epoch of the other healthy peers (-1: none)
  // Every other healthy peer's record has been renewed since the state
  // arrived, so others_top is no older than the donor's claim. Records lag
  // (a peer publishes a few times a second; epochs of a fast run pass
  // faster), so a claim ahead of older records may be honest.
  bool others_fresh = false;
  int64_t every = 0;        // average_state_every
  bool out_of_time = false; // the load's deadline passed
  // target_group_size: peers average their state in bounded groups, so the
  // swarm publishes one hash per group, and no hash has a majority.
  bool bounded = false;
};

struct Judgement {
  Verdict verdict = Verdict::wait;
  std::string why;  // what the joiner logs: the reason to refuse, or what it matched, or why it trusts
};

// A donor that claims an epoch more than `every` ahead of every other peer
// is refused once their records are fresh (others_fresh) or time is out:
// the others would not publish for it in time. Until then a hash the
// others published for that epoch still decides, and otherwise the joiner
// waits for newer records. A hash
// more than half of the other peers published decides at once. Otherwise
// the joiner waits until every other peer has published for that epoch (or
// passed it), or its time is out, and then: with no other peer publishing
// hashes it trusts; with none of them having published for that epoch it
// refuses; the hash most of them published decides; a digest none of them
// published is refused; a tie that includes it is trusted.
// With bounded groups, a digest that another peer published (a member of
// the donor's group, which averaged with it) is kept at once; one nobody
// else published is refused once every other peer has published or time
// is out. Two members of one group lying together are believed.
Judgement judge(const StateCheck &c);

}  // namespace loom_collab

#endif
