/* SPDX-License-Identifier: Apache-2.0 */
// The swarm's wire records: what peers publish in the DHT. Every record is
// framed (magic, format version, kind, the run's hash, length, CRC-32), so a
// record of another run, a truncated or a corrupted one is rejected with a
// reason, never half-read; and signed by the peer that made it (identity.h),
// so a record that speaks for a peer (its progress, join, group as leader,
// oob part) is accepted only if that peer signed it. Integers are
// little-endian, fixed width.
#ifndef LOOM_COLLAB_RECORDS_H
#define LOOM_COLLAB_RECORDS_H

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "identity.h"

namespace loom_collab {

using Bytes = std::vector<uint8_t>;

// 64-bit FNV-1a of the run id: records carry it so peers of other runs that
// share a DHT ignore each other.
uint64_t run_hash(const std::string &run_id);

// "0x" and 16 hex digits: how records, hashes and digests are named in messages.
std::string hex64(uint64_t v);

// SplitMix64's finaliser: spreads nearby inputs far apart (group hashes,
// group_split.h's permutation).
uint64_t mix64(uint64_t x);

// A peer's progress at its current collaborative epoch (hivemind's
// progress_tracker record). One per peer; the latest time_ms wins.
struct ProgressRecord {
  static constexpr uint32_t kLeft = 1;     // goodbye: the peer exited cleanly
  static constexpr uint32_t kLoading = 2;  // downloading state: not a donor, not counted
  static constexpr uint32_t kServing = 4;  // its state server is sending to someone now
  // Saw a non-finite loss or gradient since it last loaded the swarm's state:
  // not a donor until it has healed.
  static constexpr uint32_t kUnhealthy = 8;
  // Neither counted, awaited in a round nor a donor.
  static constexpr uint32_t kAway = kLoading | kUnhealthy;
  // role = "checkpointer": never trains (not counted, never in a round, no
  // vote on a sync point's hash: its state is a copy), but a donor.
  static constexpr uint32_t kCheckpointer = 16;
  // client_mode: trains and counts, but accepts no connection: never in a
  // group (a relay brings its contribution, relay.h), never a donor.
  static constexpr uint32_t kClient = 32;

  uint64_t peer_id = 0;
  int64_t epoch = 0;
  uint64_t samples = 0;  // accumulated at `epoch` since that epoch began
  double samples_per_second = 0;
  int64_t time_ms = 0;  // the sender's wall clock (ms since the Unix epoch) when made
  uint32_t flags = 0;
  std::string state_host;  // where its state server listens (reachable address)
  uint16_t state_port = 0;
  uint64_t fingerprint = 0;  // hash of what it trains (fingerprint.h); peers that differ never mix
  int64_t since_ms = 0;      // the sender's wall clock when it started: the older side of a tie is the swarm
  // Its parameters' digest (identity.h's Digest) right after its last state
  // averaging, at epoch sync_epoch: peers that averaged together publish
  // the same, and a joiner accepts a state only if it matches what most
  // peers published for its epoch. sync_hash 0: none yet.
  int64_t sync_epoch = 0;
  uint64_t sync_hash = 0;
  // The sync points before that one, newest first (at most
  // kMaxEarlierSyncs, epochs decreasing, hashes non-zero): a swarm may pass
  // several sync points between two of a joiner's reads of this record, and
  // a donor may serve one that is not the newest.
  struct SyncPoint {
    int64_t epoch = 0;
    uint64_t hash = 0;
    bool operator==(const SyncPoint &o) const { return epoch == o.epoch && hash == o.hash; }
  };
  static constexpr size_t kMaxEarlierSyncs = 3;
  std::vector<SyncPoint> earlier_syncs;

  // For observers (`loom swarm status`); no peer decides anything on these.
  uint64_t target_batch_size = 1;  // the sender's target (>= 1)
  // Its training loss as the host reported it (ABI 1.10): the mean of its
  // latest window, and the mean over its windows of epoch loss_epoch (its
  // last finished one; -1: none yet). NaN when unknown, infinite or NaN
  // too when the loss was: observers show what the peer saw.
  float last_loss = std::numeric_limits<float>::quiet_NaN();
  int64_t loss_epoch = -1;
  float epoch_loss = std::numeric_limits<float>::quiet_NaN();
  uint32_t loss_windows = 0;  // windows epoch_loss is the mean of
  // Its last averaged round (round_epoch -1: none yet): the group's hash
  // (members of one round publish the same), its size, the samples it
  // averaged, how long this peer waited for the group (matchmaking) and
  // how long the round took from the group's meeting to the next window.
  struct Round {
    int64_t epoch = -1;
    uint64_t group = 0;
    uint32_t members = 0;
    uint64_t samples = 0;
    float matchmaking_ms = 0;
    float round_ms = 0;
  };
  Round last_round;
};

// Whether r's peer answers progress requests (and takes pushes): a full
// peer with a state server that has not left and is not away. A
// client-mode peer serves nothing.
inline bool serves_progress(const ProgressRecord &r) {
  return r.state_port != 0 && !r.state_host.empty() &&
         !(r.flags & (ProgressRecord::kClient | ProgressRecord::kLeft | ProgressRecord::kAway));
}

// "I am ready to average at (epoch, attempt)": matchmaking's declaration.
struct JoinRecord {
  uint64_t peer_id = 0;
  int64_t epoch = 0;
  uint32_t attempt = 0;
  int64_t time_ms = 0;
  // The communicator this peer kept from its last round (kept_comm.h): the
  // group hash of that round and its size; 0 and 0 when it kept none.
  uint64_t kept = 0;
  uint32_t kept_size = 0;
};

// The group a leader closed for (epoch, attempt); members sorted ascending.
struct GroupRecord {
  uint64_t fingerprint = 0;  // what its members train; part of the group's hash
  uint64_t leader = 0;
  int64_t epoch = 0;
  uint32_t attempt = 0;
  std::vector<uint64_t> members;
  // Nonzero: every member kept the communicator of the round with this
  // group hash, over exactly these members, and they average over it
  // again instead of building another (kept_comm.h).
  uint64_t reuse = 0;
  // Where the leader's state server listens, when the leader is a member
  // and serves: the group's hub, to which every member (of every part)
  // sends its part of the communicator's out-of-band exchange instead of
  // the DHT (oob_hub.h). Empty and 0: none; the exchange goes through the
  // DHT. Not part of the group hash (it names no member).
  std::string hub_host;
  uint16_t hub_port = 0;
  // Not on the wire: when this group is one part of a split one
  // (group_split.h), how many peers the whole held; 0 when it is whole.
  uint32_t of = 0;
  // Not on the wire: which part of the split this is (0 when whole); every
  // member computes the same split, so the same index. It picks the oob key.
  uint32_t part = 0;
  // Hash of (fingerprint, epoch, attempt, members, reuse): equal on every member that agrees.
  uint64_t group_hash() const;
};

// One member's part of the collective's out-of-band allgather for a group.
struct OobRecord {
  uint64_t group_hash = 0;
  uint32_t rank = 0;
  uint32_t size = 0;
  // At most kMaxOobPayload bytes. On the wire without its trailing zero
  // bytes, and their count (version 6): a collective's exchange is a
  // fixed-size slot, mostly padding (the ucx plugin's 4,096 bytes carry an
  // address of a few hundred), and OpenDHT splits a value of 600 bytes or
  // more into 1,280-byte datagrams, pushed to every watcher by every node
  // that holds it.
  Bytes payload;
  // Where the member's state server listens (empty and 0: it serves none,
  // a client): a split group's part asks its first member that serves for
  // top-up grants (top_up_grants.h).
  std::string state_host;
  uint16_t state_port = 0;
  uint64_t signer = 0;  // set by decode: the peer that signed it (the group's member at rank, or a forgery)
};
constexpr size_t kMaxOobPayload = 48 * 1024;

// The text a fingerprint hashes (what a peer trains, fingerprint.h), for a
// peer whose own differs to name the first difference. Published in the DHT
// and served by a peer's state server to a peer about to join (kStateFlagModel).
struct FingerprintRecord {
  uint64_t fingerprint = 0;
  std::string text;  // at most kMaxFingerprintText bytes (longer: cut, truncated set)
  bool truncated = false;
  uint32_t peers = 1;  // live peers its publisher sees training this model, itself included (1..kMaxPeers)
};
constexpr size_t kMaxFingerprintText = 60 * 1024;
constexpr uint32_t kMaxPeers = 1u << 20;

// Each signs the record with signer's key, and throws std::invalid_argument
// when a field is outside what decode accepts (negative epoch, string over
// 255 bytes, member list empty, unsorted or over 4096, rank >= size, oob
// payload over kMaxOobPayload, rate NaN, infinite or negative; a progress or
// join record's peer_id or a group's leader that is not signer's id): a
// record is never published that peers would refuse.
Bytes encode(uint64_t run, const ProgressRecord &r, const Identity &signer);
Bytes encode(uint64_t run, const JoinRecord &r, const Identity &signer);
Bytes encode(uint64_t run, const GroupRecord &r, const Identity &signer);
Bytes encode(uint64_t run, const OobRecord &r, const Identity &signer);
Bytes encode(uint64_t run, const FingerprintRecord &r, const Identity &signer);

// Each returns nullopt and sets *why (what is wrong, e.g. "record of another
// run", "truncated: 12 of 40 bytes", "bad checksum", "not a progress
// record", "bad signature", "peer 7 is not its signer: signed by peer 9
// (forged)") when data is not a well-formed record of this kind and run,
// signed by the peer it speaks for.
std::optional<ProgressRecord> decode_progress(uint64_t run, const uint8_t *data, size_t len, std::string *why);
std::optional<JoinRecord> decode_join(uint64_t run, const uint8_t *data, size_t len, std::string *why);
std::optional<GroupRecord> decode_group(uint64_t run, const uint8_t *data, size_t len, std::string *why);
std::optional<OobRecord> decode_oob(uint64_t run, const uint8_t *data, size_t len, std::string *why);
std::optional<FingerprintRecord> decode_fingerprint(uint64_t run, const uint8_t *data, size_t len, std::string *why);

// DHT keys, namespaced by run id. Rounds (join, group, oob) are namespaced
// by run id and fingerprint together (round_space), so that peers training
// different models never meet in one.
//
// Rounds reuse kRoundBuckets keys of each kind, picked by (epoch, attempt),
// rather than a key per round: OpenDHT keeps every search it ran for 62
// minutes, one per key, so a key per round grew every peer's memory with
// the epoch rate (2.7 searches an epoch) for an hour. Each search also
// lists the nodes near its key, and keeps a node that stopped answering
// until it has been silent 10 minutes: under churn every departed peer
// stays in every search of a small swarm (SwarmDht::held counts them; a
// peer's growth over the entries added, about 2.5 KB each). With 256
// buckets (up to 2,560 round searches with the oob keys) a long-lived peer
// of 8 under 4 SIGKILLs a minute grew 70 to 136 MiB in 20 minutes; with 32
// (at most 320), 71 to 100 MiB in 16 minutes and 107 in 25: departed nodes
// leave the searches more slowly than they enter (README, "OpenDHT's
// searches under churn"). A swarm averaging as one group now uses one oob
// key a round (oob_key), 3 x kRoundBuckets round searches in all (README,
// "Fewer DHT keys and datagrams per round"; with 32 buckets, 96). Fewer keys cost nothing in pushes: a
// peer listens to every round key it used in the last minute anyway
// (OpenDHT keeps a listen 60 s after its last listener), and a value is
// pushed to every listener of its key whatever the count. They save
// searches, their refreshes (finds, listens) and their lists of departed
// peers. Not too few: a key's 4 holders store and push every value put
// under it. With 8 keys (32 holder slots) half of 64 peers hold none and
// the others serve every 8th round; with 16 (join and group keys) each
// holds about one and serves every 16th, as with 32 (about two each,
// every 32nd). One 64-peer run each: the busiest peer sent 2,933 datagrams
// an epoch with 8 keys, 2,157 with 32. A key is reused
// every 16 rounds, before its records expire (round_record_ttl, 35 s by
// default) at epochs under 2.2 s: a watch then begins with an older
// round's records too, which carry their epoch and attempt.
//
// Each peer puts a round's records under round_value_id, a value id of its
// own for that round: peers watch round keys (dht.h), and a watch never
// sees a value whose id it has seen before with other contents (OpenDHT
// takes it for a refresh), so a record of this round must not reuse the id
// of one from kRoundBuckets rounds ago. A key then holds each peer's
// records of the rounds within their ttl (round_record_ttl); records carry
// their epoch and attempt (oob records the group hash), so readers tell
// this round's from older ones.
constexpr uint32_t kRoundBuckets = 16;
// Oob keys keep 32 buckets. Under target_group_size every group builds its
// communicator every round, each on its part's key, and only its members
// need that key's values; but a peer that used the key within the last
// minute still listens: 8 buckets at epochs under 7.5 s would bring every
// group's parts to most of the swarm.
constexpr uint32_t kOobBuckets = 32;
uint64_t round_value_id(uint64_t peer, int64_t epoch, uint32_t attempt);
// How long a round's records live: a round lasts at most averaging_timeout
// (a leader under local_steps reads joins up to its deadline), and 5 s
// more cover late readers and clocks; 10 s at least, 10 minutes at most.
// Shorter than the 60 s they had, so that fast rounds leave fewer old
// records under each key (each watch begins with all of them).
std::chrono::seconds round_record_ttl(double averaging_timeout);
// Round records' expiries are moved on to a multiple of this (SwarmDht::put's
// expiry_grain): a round's joins, put over its matchmaking window, then
// expire together, and every node holding the key sends each of its
// watchers one notice for them instead of one for each. They live up to
// this much longer than their ttl.
constexpr std::chrono::seconds kRoundExpiryGrain{10};
uint32_t round_bucket(int64_t epoch, uint32_t attempt, uint32_t buckets = kRoundBuckets);
std::string progress_key(const std::string &run_id);
std::string join_key(const std::string &run_id, int64_t epoch, uint32_t attempt);
std::string group_key(const std::string &run_id, int64_t epoch, uint32_t attempt);
// A round's oob keys: kOobGroupKeys of them, a group's picked by its part
// index in the round's split (GroupRecord::part), so that a member's watch
// brings mostly its own group's parts (one key for all the groups of a
// round made every member's watch carry every group's parts, about 1 KB
// each, pushed by every node that held the key). A round of one group
// uses one oob key, not one of 8 drawn by its hash: a swarm averaging as
// one group touches kOobBuckets oob keys, not kOobBuckets *
// kOobGroupKeys, each an OpenDHT search kept an hour listing every
// departed peer (above); one that keeps its communicator (kept_comm.h)
// touches one only when its group changes.
constexpr uint32_t kOobGroupKeys = 8;
std::string oob_key(const std::string &run_id, int64_t epoch, uint32_t attempt, uint32_t part);
std::string fingerprint_key(const std::string &run_id, uint64_t fingerprint);
std::string round_space(const std::string &run_id, uint64_t fingerprint);

}  // namespace loom_collab

#endif
