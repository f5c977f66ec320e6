/* SPDX-License-Identifier: Apache-2.0 */
// A short round's top-up by grants from its group's hub (top_up = "grants").
//
// A group formed ahead meets at a few percent of its target and must train
// the rest, the deficit, before it meets again. Shares fixed at that
// meeting (health.h's top_up_shares) and time boxes (top_up_box_seconds)
// both bet on each member's speed over the next second; on a loaded machine
// that speed swings up to 5 times (8 peers on 2 cores), and the members done
// first waited 30% of an epoch for the last.
//
// Grants decide while the top-up goes on. Each member asks the group's hub
// (the leader's state server, oob_hub.h; a split group's part asks its own
// first member that serves, named in the communicator's exchange, so that
// one leader does not answer every part) for a piece of what is left,
// trains it, and asks again. The hub hands out a fraction of what is left
// at each ask, in whole batches and down to one batch (guided
// self-scheduling, as OpenMP's schedule(guided) hands out loop iterations),
// and nothing once the whole deficit is given out; the members then meet.
// A member that slows down asks less often and the others take the rest,
// so the last to come waits about one batch, and the round lands within
// one batch of the target (only the grant that crosses the deficit
// overshoots it). A member whose ask fails (the hub died, or did not
// answer in time) trains nothing more and meets its group: the hub may
// have granted that ask, so training on would overshoot. A meeting short
// after grants tops up by shares, by what the members then hold.
//
// An ask rides an oob request (the push, sealed with the swarm key where
// there is one, as a part is) and is told from a part by its record kind.
// It is a swarm record signed by the asker (records.h's frame, kind "grant
// ask"), and the hub grants only to the members of groups it leads: the
// leader registers each part of a group as it closes it, and a part's own
// hub its part as it builds the communicator (GrantLedger::lead),
// and an ask must come signed by the peer at its rank, numbered past that
// rank's last ask. A peer of the run that learns a group's hash can neither
// ask its deficit away nor crowd its books out with made-up groups, and an
// ask seen on the wire cannot be sent again.
#ifndef LOOM_COLLAB_TOP_UP_GRANTS_H
#define LOOM_COLLAB_TOP_UP_GRANTS_H

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "identity.h"
#include "records.h"

namespace loom_collab {

// What a member asks for. The deficit is the same number at every member
// (computed from one weight exchange); the hub takes the first it is told
// and refuses an ask that names another.
struct GrantAsk {
  uint64_t group_hash = 0;
  uint32_t size = 0;  // the group's members (a split group's part: its own)
  uint32_t rank = 0;
  double deficit = 0;  // samples the group must still train before it meets
  uint64_t batch = 1;  // the asker's samples a step: grants come in whole batches of it
  double share = 0;    // the asker's part of the group's training rate, (0, 1]
  // The least worth asking for: what the asker trains in about two of its
  // asks' round trips (0: no least). Over TCP on a loaded machine an ask
  // took 14 ms, the time of 23 steps of a small model, and grants of one
  // batch cost the members 13% of an epoch in asks.
  uint64_t min_samples = 0;
  uint32_t seq = 0;     // this asker's asks of the round, from 1
  uint64_t signer = 0;  // set by decode_grant_ask: the peer that signed it (the hub's own member: its id)
};

// What the hub hands out: samples to train before asking again (0: the
// deficit is given out; meet), and what is left after this grant.
struct Grant {
  uint64_t samples = 0;
  double left = 0;
};

// An ask is a swarm record of kind "grant ask", signed by its member and
// bound to the run (records.h: frame, version, signature, CRC); decode
// sets signer. A grant is little-endian, fixed size, with its magic
// ("LGRG"), a version byte and a CRC-32 (it answers on the connection
// the member opened).
Bytes encode_grant_ask(uint64_t run, const GrantAsk &a, const Identity &signer);
bool is_grant_ask(const Bytes &b);  // by its record header alone
std::optional<GrantAsk> decode_grant_ask(uint64_t run, const uint8_t *data, size_t len, std::string *why);
Bytes encode_grant(const Grant &g);
std::optional<Grant> decode_grant(const uint8_t *data, size_t len, std::string *why);

// The fraction of what is left that one ask takes, times the asker's share:
// 0.5 hands out half of the deficit at the members' first asks, and each
// member asks about ten times in a top-up of a hundred batches a member.
constexpr double kGrantFraction = 0.5;

// What one ask gets: left * share * kGrantFraction, down to whole batches,
// at least one batch and at least min_samples (up to whole batches) while
// anything is left, but no more batches than cover what is left unless the
// fraction says so; 0 when nothing is left. So only the grant that crosses
// what is left exceeds it, by less than one batch.
uint64_t grant_size(double left, double share, uint64_t batch, uint64_t min_samples = 0);

// The hub's books: the groups it leads and what is left of each one's
// deficit. Thread-safe.
class GrantLedger {
 public:
  using Clock = std::chrono::steady_clock;
  // Groups kept at once (the least recently led or asked go first) and for
  // how long one nobody asks is kept.
  static constexpr size_t kMaxGroups = 256;
  static constexpr std::chrono::seconds kKeep{60};

  // A group (a split group's part) this hub leads: its members may ask.
  // Leading it again keeps its books.
  void lead(const GroupRecord &group);
  // nullopt with *why for an ask of a group this hub does not lead, signed
  // by another peer than the member at its rank, numbered at or below that
  // rank's last ask, or naming another deficit than the group's first ask.
  std::optional<Grant> grant(const GrantAsk &ask, std::string *why);
  uint64_t asks() const;  // grants handed out (0 included)

 private:
  struct Group {
    std::vector<uint64_t> members;  // by rank
    std::vector<uint32_t> seq;      // each rank's last ask
    double deficit = 0;             // 0 until the first ask
    double left = 0;
    Clock::time_point touched;
  };
  void forget_old(Clock::time_point now);  // under m_
  mutable std::mutex m_;
  std::map<std::pair<uint64_t, uint32_t>, Group> groups_;  // (group hash, size)
  uint64_t asks_ = 0;
};

}  // namespace loom_collab

#endif
