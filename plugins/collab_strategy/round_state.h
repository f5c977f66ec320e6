/* SPDX-License-Identifier: Apache-2.0 */
// The rounds a Peer carries between its hooks: one prepared ahead of the
// target (Prematch), one whose data moves on a helper thread (DelayedRound),
// one short of the target that meets again (Pending), and how a round ended.
#ifndef LOOM_COLLAB_ROUND_STATE_H
#define LOOM_COLLAB_ROUND_STATE_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "group_comm.h"
#include "health.h"
#include "records.h"
#include "top_up_grants.h"

namespace loom_collab {

// A round being prepared ahead of the target: the group and its
// communicator, built on their own thread while this peer still accumulates.
struct Prematch {
  int64_t epoch = -1;
  Clock::time_point started{};
  std::thread thread;
  std::atomic<bool> cancel{false};
  std::atomic<bool> done{false};
  // Written by the thread before `done`; read after join.
  std::optional<GroupRecord> group;
  std::unique_ptr<GroupComm> comm;
  std::string why;  // why there is no communicator, when there is none
  Clock::time_point matched{}, connected{};
};

// delay_averaging (delayed_round.cpp): a round whose group met and counted
// the target, its data moving on a helper thread (in Peer::buffer_) while
// the training thread accumulates the next epoch.
struct DelayedRound {
  GroupRecord group;
  std::unique_ptr<GroupComm> comm;
  MemberWeights members;
  int64_t epoch = 0;
  double total = 0;     // the members' summed samples
  bool sliced = false;  // sliced_average (codec or centered_clip): buffer_ holds the mean, else the sum
  Clock::duration waited{};
  bool ahead = false;
  Clock::time_point posted{}, finished{};
  std::thread thread;
  std::atomic<bool> done{false};
  // Written by the thread before `done`; read after join.
  bool ok = false, finite = true;
  std::string why;
};

// What a member's asks of a top-up by grants came to, for the round's line.
struct GrantTally {
  uint32_t asks = 0;
  uint32_t ahead = 0;   // of them sent ahead
  uint32_t waited = 0;  // of them the training thread waited for over 1 ms
  uint64_t samples = 0;    // granted
  double round_trip = 0;   // seconds an ask took, smoothed (what asking ahead must cover)
};

struct TopUpGrants;

// What a short round's meeting hands to the group's next meeting.
struct TopUpCarry {
  // The round's target as the members agreed at their last meeting: a
  // meeting again never raises it (swarm_capped_target follows counts and
  // rates that move; a capped group of 3 met with 152,960, and met again to
  // find 524,288). 0: none agreed yet.
  uint64_t target = 0;
  Clock::duration waited{};      // what the group's meetings of this epoch waited so far
  Clock::duration first{};       // of which the first meeting's
  Clock::duration asking{};      // and asking for grants (top_up = "grants"), not in waited
  std::vector<double> box_from;  // a time box's: the members' samples when it was set
  double box_seconds = 0;        // and its length (0: no box)
  // top_up = "grants": a round takes grants once (a meeting short after
  // them tops up by shares); what this member asked, for the round's line.
  bool granted = false;
  GrantTally grants;
  void add(const TopUpGrants &g);  // what a top-up by grants asked, its wait included
};
// What the round's line says of its top-up (grant_round.cpp): its grants and
// where its wait went; empty for a round that met once.
std::string top_up_text(const TopUpCarry &in, Clock::duration last_meeting, double after_last_ms);

// Which hub a group's members ask for grants (Peer::grant_hub).
struct GrantHub {
  bool own = false;  // this peer is the hub: it asks its own ledger
  std::string host;  // otherwise, where the hub's state server listens
  uint16_t port = 0;
};

// top_up = "grants" (top_up_grants.h): how this member asks its group's hub.
struct TopUpGrants {
  GrantAsk ask;
  std::string host;
  uint16_t port = 0;
  bool own = false;        // this peer is the group's hub
  bool failed = false;     // an ask failed: this member asks no more and meets its group
  bool given_out = false;  // the hub said nothing is left: meet once this grant is trained
  GrantTally tally;
  Clock::duration asking{};  // the training thread's time waiting for grants (counted as the round's wait)
  // An ask sent ahead, while this member still trains its last grant.
  struct Asked {
    std::optional<Grant> grant;
    std::string why;
    double seconds = 0;
  };
  std::future<Asked> ahead;
};

// A round that fell short of target_batch_size: its group stays together
// while each member accumulates its share of the deficit, then meets again.
struct Pending {
  GroupRecord group;
  std::unique_ptr<GroupComm> comm;
  uint64_t until_samples = 0;      // this peer's samples when it may meet again
  Clock::time_point until_time{};  // and not before (a member with no share waits as long as the others)
  Clock::time_point others_by{};   // when the slowest member should be done with its share (top_up_seconds)
  TopUpCarry carry;
  std::optional<TopUpGrants> grants;  // top_up = "grants": ask for more at until_samples
};

// How a round ended for this peer.
enum class RoundEnd {
  averaged,         // the gradients hold the group's weighted mean
  alone,            // no group: the gradients hold this peer's own mean
  moved_on,         // the swarm finished the epoch without this peer
  short_of_target,  // the members' summed weights fell short: pending_ holds the group
  discarded,        // nothing usable came out (no finite contribution, or a non-finite result)
  launched,         // delay_averaging: the round's data moves on a helper thread (Peer::delayed_)
};

}  // namespace loom_collab

#endif
