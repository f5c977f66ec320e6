/* SPDX-License-Identifier: Apache-2.0 */
// A group's hub: the out-of-band exchange of a round's communicator over
// TCP, through the state server of the peer that led the group, instead of
// the DHT.
//
// Building a communicator needs an allgather of the members' addresses
// before any connection between them exists. Through the DHT each member's
// part is put on 4 holders and pushed by each to every member watching the
// key: at 64 peers in groups of 4, a third of the rounds that could not
// start timed out there ("N of 4 members never published"), and the parts
// were about half of the values the DHT carried at 8 peers under churn.
// Every member already knows the leader (it signed the group record, which
// names its address), and the leader's server already takes requests: so
// each member sends its signed part there (kStateFlagOob) and the reply,
// held until the leader holds a part of every rank, brings the others':
// one connection a member, no DHT value at all. Each part stays signed by
// its member and is checked by every reader as before, so the hub can
// withhold a part but never forge one.
//
// Where the hub cannot be reached (the leader announced an address nobody
// reaches, or died), a member falls back to the DHT at once; members that
// did reach it go to the DHT after half the exchange's time (GroupComm).
//
// The hub also keeps the books of its groups' top-up grants
// (top_up_grants.h): an ask, a signed record of its own kind, rides an oob
// request as a part does.
#ifndef LOOM_COLLAB_OOB_HUB_H
#define LOOM_COLLAB_OOB_HUB_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "records.h"
#include "top_up_grants.h"
#include "../common/swarm_key.h"

namespace loom_collab {

class Sealer;

class OobHub {
 public:
  using Clock = std::chrono::steady_clock;
  // Groups whose parts are kept at once (the least recently touched go
  // first) and how long an untouched group is kept; how many signers a
  // rank may have (a forged part must not crowd the member's out).
  static constexpr size_t kMaxGroups = 256;
  static constexpr std::chrono::seconds kKeep{60};
  static constexpr size_t kMaxSignersPerRank = 4;

  OobHub(uint64_t run, const std::optional<loom_key::SwarmKey> &key);
  ~OobHub();
  OobHub(const OobHub &) = delete;
  OobHub &operator=(const OobHub &) = delete;

  // What a member pushes: its encoded OobRecord, sealed with the swarm key
  // (bound to the run and to this use) in a keyed swarm.
  Bytes wrap(const Bytes &record) const;

  // The state server's handler (any of its threads): opens and checks a
  // pushed part (a record of this run signed by its member), files it under
  // its group (hash and size), and waits up to hold, or until stop(), for a
  // part of every rank. Returns the group's parts as a progress table
  // (state_transfer.h's encoding), or nullopt with *why for a push that
  // does not open or is no valid part. A grant ask (top_up_grants.h) is
  // answered at once with a table of one encoded Grant.
  std::optional<Bytes> serve(const Bytes &pushed, std::chrono::milliseconds hold, const std::function<bool()> &stop,
                             std::string *why);
  // The hub's own member: files its own record (encoded, not wrapped) and
  // waits the same way; returns the group's parts (records as encoded).
  std::vector<Bytes> exchange(const Bytes &record, std::chrono::milliseconds hold, const std::function<bool()> &stop);

  // A group (a split group's part) this peer leads: its members may ask
  // for grants (GrantLedger::lead).
  void lead(const GroupRecord &group) { grants_.lead(group); }
  // The hub's own member's ask (not encoded; its signer set by the caller).
  std::optional<Grant> grant(const GrantAsk &ask, std::string *why) { return grants_.grant(ask, why); }

  uint64_t parts() const { return parts_.load(); }      // distinct parts filed (a part sent again counts once)
  uint64_t refused() const { return refused_.load(); }  // pushes that were no valid part (or grant ask)
  uint64_t grants_given() const { return grants_.asks(); }  // asks granted (0 samples included)

 private:
  struct Group {
    uint32_t size = 0;
    std::map<std::pair<uint32_t, uint64_t>, Bytes> parts;  // (rank, signer) -> record
    std::vector<bool> ranks;                               // which ranks have a part
    size_t missing = 0;
    Clock::time_point touched;
  };
  using GroupKey = std::pair<uint64_t, uint32_t>;  // (group hash, size)
  // Files a checked record; false with *why. Under m_.
  bool file(const Bytes &record, GroupKey *key, std::string *why);
  std::vector<Bytes> wait(const GroupKey &key, std::chrono::milliseconds hold, const std::function<bool()> &stop);
  Bytes ad() const;

  uint64_t run_;
  std::unique_ptr<Sealer> sealer_;
  std::mutex m_;
  std::condition_variable filed_;
  std::map<GroupKey, Group> groups_;  // guarded by m_
  GrantLedger grants_;
  std::atomic<uint64_t> parts_{0}, refused_{0};
};

}  // namespace loom_collab

#endif
