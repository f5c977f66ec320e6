/* SPDX-License-Identifier: Apache-2.0 */
// What a peer knows about the swarm from the progress records in the DHT:
// the global epoch, the samples accumulated towards it, the live peers and
// the donors to load state from. Pure bookkeeping (no I/O), so it is tested
// on its own; the peer feeds it what its background thread reads.
#ifndef LOOM_COLLAB_TRACKER_H
#define LOOM_COLLAB_TRACKER_H

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "records.h"
#include "state_transfer.h"

namespace loom_collab {

struct SwarmView {
  int64_t global_epoch = 0;  // the highest epoch of a live peer (this one included)
  uint64_t samples = 0;      // accumulated at global_epoch by every live peer, extrapolated
  double rate = 0;           // samples per second of the live peers at global_epoch
  // Samples per second of every live peer that trains (not loading or
  // diverged), whatever epoch its record still shows, and whether each of
  // them published a rate: the denominator of a peer's share of the target.
  // A record two epochs behind is most often one that has not caught up
  // with rounds that went fast; leaving its peer out of `rate` made every
  // peer's share too large, and the swarm overshot the target by up to half.
  double training_rate = 0;
  bool all_rated = false;
  size_t peers = 1;          // live peers, this one included (an estimate when sampled)
  bool sampled = false;      // read from a sample of the records (sampled progress, progress_shards.h)
  // Live peers (not this one) at `epoch` who are training, not loading.
  std::vector<uint64_t> training_at(int64_t epoch) const;
  // Live peers (not this one) training at an epoch from `behind` before
  // `epoch` up to it: those a matchmaking leader expects to join, since a
  // record may lag its peer's progress by several fast epochs.
  std::vector<uint64_t> training_near(int64_t epoch, int64_t behind) const;
  // Those of them that accumulate (samples at this epoch, or a rate): the
  // ones worth waiting for. A member that publishes progress but never
  // trains (stuck, or broken) must not hold the others up for a whole
  // averaging_timeout.
  std::vector<uint64_t> accumulating_at(int64_t epoch) const;
  // Whether a live peer other than this one trains (not loading, unhealthy
  // or a client) at an epoch no more than `behind` before `epoch`, or after
  // it: its record may lag its progress.
  bool others_train_near(int64_t epoch, int64_t behind) const;
  std::vector<ProgressRecord> others;  // live, not this one, not a checkpointer
};

// What the live peers other than a donor published of their parameters
// for one state-averaging epoch (ProgressRecord::sync_hash): the donor's
// own vote never counts for the state it sends. Peers that are loading or
// unhealthy (ProgressRecord::kAway) do not vote: their hashes are old or of
// diverged parameters.
struct SyncVotes {
  std::map<uint64_t, size_t> votes;  // hash -> other peers that published it for the epoch
  size_t others = 0;                 // other peers that publish hashes at all
  size_t others_reached = 0;         // of them, those that published this epoch or a later one
  // hash -> other peers that published it for the epoch in any record this
  // tracker holds, live or not (a hash never changes): the evidence for a
  // bounded group's state, whose few mates' records, under sampled progress
  // at 64 peers, were mostly older than the live horizon, so that joiners
  // refused honest donors' states.
  std::map<uint64_t, size_t> vouchers;
  // The hash more than half of the others published (it cannot change).
  std::optional<uint64_t> majority() const;
  // The hash more of the others published than any other (none on a tie).
  std::optional<uint64_t> leader() const;
  size_t count(uint64_t hash) const {
    auto it = votes.find(hash);
    return it == votes.end() ? 0 : it->second;
  }
};

// How long a peer may go without reading the swarm's records again, in ms:
// an eighth of the time the swarm needs to reach target at its rate, from
// kMinReadIntervalMs to kMaxReadIntervalMs (also while no rate is known);
// kReachedReadIntervalMs once the target is reached (the peer then enters a
// round, and its next epoch reads at once). Far from the target the estimate
// extrapolates the peers' rates between reads; near it reads are as close
// as the floor (hivemind's progress tracker refreshes by its ETA likewise).
// Each read is a DHT get of every peer's record; the training thread wakes
// the reader on every step, which on a small model is thousands a second.
constexpr int64_t kMinReadIntervalMs = 10;
constexpr int64_t kMaxReadIntervalMs = 1000;
constexpr int64_t kReachedReadIntervalMs = 50;
// While nobody accumulates (a swarm waiting for min_peers), kIdleReadMsPerPeer
// per peer seen, from kMinIdleReadIntervalMs to kMaxReadIntervalMs: 64 peers
// waiting on 2 cores spent them on reads at the floor, while in a 3-peer
// swarm a peer that read just before the third record arrived went on waiting
// a second after the others had started (70 digits epochs, in CI).
constexpr int64_t kIdleReadMsPerPeer = 100;
constexpr int64_t kMinIdleReadIntervalMs = 200;
int64_t read_interval_ms(const SwarmView &v, uint64_t target);

// A peer more than one epoch behind the swarm catches up. Where states are
// checked (average_state_every > 0), donors serve only state-averaging
// epochs: asked for the swarm's epoch, they answer at the next sync point,
// which in a slow swarm comes long after load_state_timeout (at 64 peers
// on 2 cores, epochs of 35 s and a sync point every 5: half the peers never
// averaged, each load waiting a minute and failing). When the next sync
// point is further than half the load's timeout, the plan is the last sync
// point instead (the peers that reached it hold it, checked), or nothing when this peer
// is past it already, and then to follow the swarm to its epoch, as a peer
// one epoch behind does; state averaging pulls its parameters in at the
// next sync point. Otherwise, the swarm's epoch as before.
struct ResyncPlan {
  int64_t load_epoch = -1;  // the epoch to ask donors for (-1: load nothing)
  int64_t follow_to = -1;   // the epoch to move to afterwards (-1: the loaded one)
};
// epoch_seconds: how long an epoch takes the swarm (its target over its
// rate; 0 or infinite when unknown: treated as far), counted twice for
// the rounds' own time.
ResyncPlan plan_resync(int64_t own_epoch, int64_t swarm_epoch, int64_t average_state_every, double epoch_seconds,
                       double load_state_timeout);
// How long the swarm's epochs take, from its records alone (all a joiner
// has at its start). The rate is a compute rate and leaves rounds out:
// epochs took 23 s at 64 peers on 2 cores where it gave a few seconds at
// most (an estimate from the bench's rates, not logged). The estimate is
// the longest of each peer's life over its epoch, (time_ms - since_ms) /
// epoch, both on its own clock. A peer that loaded
// its epoch has lived less per epoch than the swarm, the founder about as
// long (its start and bootstrap included: an estimate on the long side,
// which sends a joiner to the last sync point rather than waiting for the
// next). 0 when no record has an epoch.
double epoch_seconds_by_lifetimes(const std::vector<ProgressRecord> &records);

// Sampled progress (progress_shards.h): what the latest read brought when it
// read only some of the swarm's shards. The swarm's samples and rate are
// then those of the fresh records scaled to the estimated swarm: records of
// shards read earlier are older than the extrapolation trusts.
struct SampledProgress {
  std::vector<uint64_t> fresh;  // peers (not this one) whose records the latest read brought, sorted
  double peers = 0;             // the swarm's estimated size, this peer included
};

// How one record read counts at now_ms (its sender's clock): in the swarm's
// size while the DHT still keeps it (not a goodbye, at most ttl_ms old: a
// copy is put every few seconds and lives ttl_ms), in the sample only while
// live (at most live_ms old). At 64 peers on 2 cores copies aged past the
// live horizon, and a size of live records alone fell to 8 or less of 64.
struct RecordCount {
  bool in_size = false;
  bool live = false;
};
RecordCount count_record(const ProgressRecord &r, int64_t now_ms, int64_t live_ms, int64_t ttl_ms);
// The swarm a sample stands for, this peer included: the estimate (of
// every record kept) scaled by the live part of what the reads held, `live`
// of `kept` records, so that the view scales live records up to live peers.
double sampled_swarm(double estimate, size_t live, uint64_t kept);

class Tracker {
 public:
  // ttl_ms: a record older than this (by its sender's clock) is a dead peer.
  explicit Tracker(int64_t ttl_ms) : ttl_ms_(ttl_ms) {}
  // The live horizon from now on (the swarm's reads may change how fresh
  // the records they bring can be).
  void set_ttl_ms(int64_t ttl_ms) { ttl_ms_ = ttl_ms; }

  // Keeps the newest record of each peer. A goodbye record removes the peer
  // until it publishes a newer one. Returns false, and keeps what it had,
  // for a record older (by its time_ms) than one already merged from that
  // peer: a replay (a signed record re-published to undo a later one, such
  // as its goodbye) or a stale copy from a slow node. Records are signed, so
  // a replay can only bring back what the peer once said.
  bool merge(const ProgressRecord &r);
  // The newest time_ms merged from peer (0: none).
  int64_t newest(uint64_t peer) const;
  // Whether peer's newest record is its goodbye, stamped at since_ms or
  // later (by its sender's clock).
  bool left_since(uint64_t peer, int64_t since_ms) const;
  // Every live peer's record, checkpointers included (view() leaves them
  // out: they do not train), by peer id; with horizon_ms, every record at
  // most that old that is not a goodbye (kAnyAge: every one held).
  std::vector<ProgressRecord> live_records(int64_t now_ms, int64_t horizon_ms = -1) const;
  static constexpr int64_t kAnyAge = INT64_MAX / 2;
  // Peers other than `me` (checkpointers left out) whose newest record is
  // at most age_ms old and not a goodbye: a count for waiting on min_peers,
  // where records age past the live horizon on a loaded machine.
  size_t recent_peers(uint64_t me, int64_t now_ms, int64_t age_ms) const;
  // Of the records held (peers other than me, goodbyes left out): how many,
  // and the age of the youngest at now_ms (-1: none), for the log.
  std::pair<size_t, int64_t> held(uint64_t me, int64_t now_ms) const;
  // view()'s global_epoch alone, without copying the records.
  int64_t global_epoch(uint64_t me, int64_t my_epoch, int64_t now_ms) const;

  // The swarm as seen at now_ms, with this peer's own numbers; this peer
  // entered my_epoch at epoch_start_ms. With `sample`, the swarm's samples,
  // rate and size are scaled up from the sampled records.
  SwarmView view(uint64_t me, int64_t my_epoch, uint64_t my_samples, double my_rate, int64_t now_ms,
                 int64_t epoch_start_ms = 0, const SampledProgress *sample = nullptr) const;

  // What the live peers published for epoch; others counts those besides
  // donor. Each peer's last kSyncHistory hashes are remembered, so a joiner
  // can still check an epoch the swarm has just left.
  SyncVotes sync_votes(int64_t epoch, uint64_t donor, int64_t now_ms) const;
  static constexpr size_t kSyncHistory = 8;

  // Peers to download state from, best first: highest epoch, then idle
  // (not serving), then fewer recent picks; only epochs >= min_epoch.
  // Epochs are compared in periods of `period` (average_state_every, when
  // donors serve only the state of a state-averaging epoch: donors within
  // one period serve the same state, so the idle ones come first). With
  // period > 1, before all that, the peers whose records name a sync point
  // at min_epoch or later come first: the others skipped it (they loaded a
  // later state, or followed the swarm past it) and cannot send it.
  std::vector<Donor> donors(uint64_t me, int64_t min_epoch, int64_t now_ms, int64_t period = 1) const;

 private:
  // Not a goodbye, and at most horizon_ms old (ttl_ms_ when negative).
  bool live(const ProgressRecord &r, int64_t now_ms, int64_t horizon_ms = -1) const;
  int64_t ttl_ms_;
  std::map<uint64_t, ProgressRecord> peers_;
  std::map<uint64_t, std::map<int64_t, uint64_t>> syncs_;  // peer -> its recent (sync_epoch -> sync_hash)
};

}  // namespace loom_collab

#endif
