/* SPDX-License-Identifier: Apache-2.0 */
// A communicator over one averaging group, built through the collective
// plugin (opened once by name through the host). Its out-of-band exchange
// goes through the group's hub (oob_hub.h) where there is one, and
// otherwise, or when the hub fails, through the DHT: each member publishes
// its part under the group's hash and reads the others'. Because the key
// (and the hub's mailbox) is the hash of (epoch,
// attempt, members), members that disagree about the group never meet:
// their exchange times out and they retry, instead of averaging wrongly.
// Each part is signed (records.h) and read only from the member at its rank.
#ifndef LOOM_COLLAB_GROUP_COMM_H
#define LOOM_COLLAB_GROUP_COMM_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dht.h"
#include "loom/collective.h"
#include "records.h"

namespace loom_collab {

using Clock = std::chrono::steady_clock;

class GroupComm {
 public:
  // identity signs this member's part of the exchange (it must outlive this).
  GroupComm(const loom_collective_v1 *vt, loom_collective_ctx *instance, SwarmDht *dht, std::string run_id,
            uint64_t run, const Identity *identity)
      : vt_(vt), instance_(instance), dht_(dht), run_id_(std::move(run_id)), run_(run), identity_(identity) {}
  ~GroupComm() { close(false); }
  GroupComm(const GroupComm &) = delete;
  GroupComm &operator=(const GroupComm &) = delete;

  // Collective over group.members; this peer is `me`. Bounded by deadline.
  // On failure *why says what failed and nothing stays open.
  loom_status open(const GroupRecord &group, uint64_t me, Clock::time_point deadline, std::string *why);
  // open() gives up early (LOOM_ERR_ABORTED) once *cancel is set; null: never.
  void set_cancel(const std::atomic<bool> *cancel) { cancel_ = cancel; }
  // Whether a member published its goodbye (it left the swarm) after
  // since_ms, this process's wall clock against the record's: set by the
  // peer. A wait on an operation then gives up once a member of the group
  // left (after kLeftGraceMs, for what it sent before leaving to land)
  // rather than at the deadline: a member that stops by SIGTERM between
  // its group's meetings never comes to the next one.
  using Left = std::function<bool(uint64_t member, int64_t since_ms)>;
  void set_left(Left left) { left_ = std::move(left); }
  static constexpr int64_t kLeftGraceMs = 1000;
  // Whether to give up on the group: a member's goodbye was read at least
  // kLeftGraceMs ago (*gone says whose). Polling loops call it between
  // polls; waits here do it themselves.
  bool member_left(std::string *gone);
  // The next open()'s hub (oob_hub.h): given this member's encoded part,
  // how long the hub may hold its reply and how long the whole ask may
  // take (connection included; at least hold), returns the parts the hub
  // held (records as encoded; each is checked here as a DHT value is), or
  // nullopt with *why when the hub cannot be reached or did not answer in
  // time. Empty: no hub, the DHT alone.
  using HubExchange = std::function<std::optional<std::vector<Bytes>>(
      const Bytes &part, std::chrono::milliseconds hold, std::chrono::milliseconds wait, std::string *why)>;
  void set_hub(HubExchange hub) { hub_ = std::move(hub); }
  // Where this member's state server listens (0: none), named in its part
  // of the next open()'s exchange.
  void set_own_server(std::string host, uint16_t port) {
    own_host_ = std::move(host);
    own_port_ = port;
  }
  // Each member's state server by rank, as its part of the last open()'s
  // exchange named it (empty and 0: it serves none); kept by adopt(). The
  // first rank that serves, or -1: a split part's hub for top-up grants.
  const std::vector<std::pair<std::string, uint16_t>> &servers() const { return servers_; }
  int32_t first_server() const;
  // How this process's exchanges went (every GroupComm): completed through
  // the hub alone, completed through the DHT (no hub, or after the hub
  // failed), tried a hub and went on to the DHT (completed or not), and
  // failed (timed out, or the round was abandoned).
  struct ExchangeCounts {
    uint64_t hub = 0, dht = 0, hub_failed = 0, failed = 0;
  };
  static ExchangeCounts exchange_counts();
  // The same as a sentence for a peer's exit: "built N communicators: ...".
  static std::string exchange_text();
  bool is_open() const { return comm_ != nullptr; }
  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  // The group it last served (open, or adopt): its hash, epoch and attempt.
  uint64_t group_hash() const { return group_hash_; }
  int64_t epoch() const { return epoch_; }
  uint32_t attempt() const { return attempt_; }

  // Serves another round of the same members (kept_comm.h): takes group's
  // epoch, attempt and hash, keeping the plugin's communicator. Refused
  // (*why) unless it is open and group lists exactly its members with this
  // peer at the same rank.
  loom_status adopt(const GroupRecord &group, uint64_t me, std::string *why);
  // Whether the current round adopted it rather than building it.
  bool adopted() const { return adopted_; }

  // In-place sum over the members, finished (or failed) by deadline. A
  // failure aborts and closes the communicator.
  loom_status allreduce_sum(float *buf, uint64_t count, Clock::time_point deadline, std::string *why) {
    return allreduce(buf, count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, deadline, why);
  }
  loom_status allreduce(void *buf, uint64_t count, loom_dtype dtype, loom_reduce_op op, Clock::time_point deadline,
                        std::string *why);
  // recv = scale x (the sum of every member's send), f32, out of place (send
  // is left as it was, so a retry can start from it). Only for collectives
  // that offer allreduce_scaled (ABI 1.3). A failure aborts and closes.
  loom_status allreduce_scaled(const float *send, float *recv, uint64_t count, double scale,
                               Clock::time_point deadline, std::string *why);

  // Bytes, out of place: block j (bytes long) of this member's send lands in
  // block (this rank) of member j's recv. A failure aborts and closes.
  loom_status alltoall(const void *send, void *recv, uint64_t bytes, Clock::time_point deadline, std::string *why);
  // Bytes, out of place: recv (size x bytes) gets every member's send in
  // rank order. A failure aborts and closes.
  loom_status allgather(const void *send, void *recv, uint64_t bytes, Clock::time_point deadline, std::string *why);

  // Point to point, one block of bytes of any size to or from one member
  // (balanced_round.cpp posts many and polls them). Blocks between two
  // members match in posting order. A failed post or poll leaves the
  // request for abandon_blocks.
  struct Block {
    int32_t peer;
    void *data;  // read, for a send
    uint64_t bytes;
  };
  loom_status post_block(const Block &b, bool send, loom_request **request, std::string *why);
  // Polls one posted block: *done once it finished, and then the request is
  // freed and nulled.
  loom_status test_block(loom_request **request, bool *done, std::string *why);
  // After a failure or a deadline: aborts, frees every request still in
  // *requests (nulling them) and closes the communicator.
  void abandon_blocks(std::vector<loom_request *> *requests);

  // Returns once every member called it (by deadline). A failure aborts and
  // closes the communicator.
  loom_status barrier(Clock::time_point deadline, std::string *why);

  // Destroys the communicator (aborting first when abort is set).
  void close(bool abort);
  // What every GroupComm of this process handed its collective to move:
  // the payload of each call this member posted (an allreduce's buffer, an
  // alltoall's or allgather's send), not what the transport put on the wire
  // (a ring allreduce sends about twice its buffer). Rounds and state
  // averaging alike; matchmaking and state downloads go elsewhere.
  static uint64_t payload_bytes();
  // What the collective itself counted for every communicator of this
  // process, read as each one closes (comm_stats, ABI 1.11): the bytes this
  // member sent and received, its own headers included. False when the
  // plugin does not count (then both stay 0).
  static bool wire_bytes(uint64_t *sent, uint64_t *received);

 private:
  static loom_status oob_allgather(void *user, const void *send, size_t len, void *recv, int64_t timeout_ms) noexcept;
  loom_status exchange(const void *send, size_t len, void *recv, int64_t timeout_ms);
  // The exchange's first half through the hub: true once every part came.
  // Asks the hub until `until` (holds end by then; an ask's answer may come
  // up to `latest`).
  bool through_hub(const Bytes &value, Clock::time_point until, Clock::time_point latest,
                   const std::function<bool(const std::vector<Bytes> &)> &take, const std::function<bool()> &complete,
                   std::string *failed, bool *reachable);
  const char *error_text() const;  // the failed call's message
  static loom_status no_comm(std::string *why);
  loom_status complete(loom_status posted, loom_request *request, Clock::time_point deadline, const char *what,
                       std::string *why);

  // wait() by deadline; with left_ set, in slices, giving up (PEER_FAILED,
  // *gone saying who) once a member left.
  loom_status wait_for(loom_request *request, Clock::time_point deadline, std::string *gone);

  const loom_collective_v1 *vt_;
  loom_collective_ctx *instance_;
  SwarmDht *dht_;
  std::string run_id_;
  uint64_t run_;
  loom_comm *comm_ = nullptr;
  int32_t rank_ = 0, size_ = 0;
  uint64_t group_hash_ = 0;
  uint32_t part_ = 0;  // the group's index in its round's split: picks the oob key
  int64_t epoch_ = 0;
  uint32_t attempt_ = 0;
  const Identity *identity_;
  uint64_t me_ = 0;  // this member's peer id: its oob value's id (one per peer under a reused key)
  std::vector<uint64_t> members_;  // the group's, by rank: each oob part must be signed by its member
  std::string own_host_;
  uint16_t own_port_ = 0;
  std::vector<std::pair<std::string, uint16_t>> servers_;  // by rank, from the exchange
  std::string oob_error_;
  const std::atomic<bool> *cancel_ = nullptr;
  Left left_;
  int64_t opened_ms_ = 0;  // wall clock at open(): goodbyes older than it are not this group's
  int64_t left_seen_ms_ = -1;  // when member_left first read a member's goodbye (-1: none yet)
  size_t left_rank_ = 0;
  int64_t left_checked_ms_ = 0;  // when member_left last read the table
  bool adopted_ = false;
  HubExchange hub_;
};

}  // namespace loom_collab

#endif
