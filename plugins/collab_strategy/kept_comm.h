/* SPDX-License-Identifier: Apache-2.0 */
// A group's communicator, kept from one round for the next. Building one
// costs every member an out-of-band record through the DHT, which OpenDHT
// pushes from 4 holders to every peer watching the key (at 8 peers about
// 8 of the 17 values a round), and the collective its connections. A
// swarm whose group stays the same from round to round (no churn, no
// bounded groups splitting it) averages over the last round's
// communicator again, as a data-parallel job keeps its one communicator.
//
// Agreement, with no message of its own: each member's join names the
// communicator it kept (the hash of the last round that used it, and its
// size). The leader asks for it in the group record (GroupRecord::reuse)
// only when every member named the same one and they are as many as it
// holds: then they are exactly its members, at the same ranks (members
// sorted). A member whose round failed on it holds it no more (a failed
// operation closes it), names another or none at its next join, and the
// group builds a new one. Rounds that agree on a communicator are as
// separate as before: the members exchange their epoch and attempt first
// (Peer::exchange_weights) and a round that disagrees fails.
#ifndef LOOM_COLLAB_KEPT_COMM_H
#define LOOM_COLLAB_KEPT_COMM_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "group_comm.h"

namespace loom_collab {

class KeptComm {
 public:
  // After a round: keeps comm if it is still open (none of its operations
  // failed), in place of the one kept before; a closed one changes nothing.
  void keep(std::unique_ptr<GroupComm> comm);
  // What this peer's join names: the kept communicator's last round hash
  // and size, 0 and 0 for none.
  void named(uint64_t *round, uint32_t *size) const;
  // The kept communicator, adopted for group (whose reuse names it); null
  // with *why when this peer keeps another one or none.
  std::unique_ptr<GroupComm> take(const GroupRecord &group, uint64_t me, std::string *why);
  // Closes the kept communicator, if any (teardown).
  void clear();
  // Rounds that took the kept communicator, in this process.
  uint64_t taken() const { return taken_.load(); }

 private:
  mutable std::mutex mutex_;
  std::unique_ptr<GroupComm> comm_;  // its group_hash() and size() are what joins name
  std::atomic<uint64_t> taken_{0};
};

}  // namespace loom_collab

#endif
