/* SPDX-License-Identifier: Apache-2.0 */
// What `loom swarm status` makes of the progress records it reads: the live
// peers, the swarm's rate and time to its next epoch, the recent rounds
// (peers of one round publish the same group hash), and the swarm-wide mean
// loss per epoch for --csv. Pure bookkeeping (no I/O but the CSV file), so
// it is tested on its own; swarm_status_main.cpp feeds it what the DHT holds.
#ifndef LOOM_COLLAB_OBSERVER_H
#define LOOM_COLLAB_OBSERVER_H

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "records.h"
#include "tracker.h"

namespace loom_collab {

// One averaging round as its members reported it (ProgressRecord::last_round).
struct ObservedRound {
  int64_t epoch = 0;
  uint64_t group = 0;
  uint32_t size = 0;                // members the group had
  std::set<uint64_t> members_seen;  // those whose records reported it
  uint64_t samples = 0;
  double round_ms = 0;        // the slowest reporting member's
  double matchmaking_ms = 0;  // the longest a reporting member waited for the group
};

struct SwarmSnapshot {
  int64_t time_ms = 0;
  int64_t epoch = 0;              // the highest epoch of a live peer
  uint64_t samples = 0;           // accumulated towards it, extrapolated as a peer does
  uint64_t target_batch_size = 0; // what most live peers announce (0: no peer)
  double samples_per_second = 0;  // of the live peers at `epoch`
  std::optional<double> eta_s;    // to the next epoch at that rate; none without a rate
  std::vector<ProgressRecord> peers;  // live, by peer id
  size_t models = 0;                  // distinct fingerprints among them (1 in a sound swarm)
  std::vector<ObservedRound> rounds;  // recent, newest first
  // The mean of the live peers' latest losses, over the finite ones, and
  // how many reported one that was not finite.
  std::optional<double> mean_loss;
  size_t nonfinite_losses = 0;
};

class SwarmObserver {
 public:
  // ttl_ms: a record older than this (by its sender's clock) is a dead peer.
  explicit SwarmObserver(int64_t ttl_ms = 5000) : tracker_(ttl_ms) {}

  // Keeps the newest record of each peer (as a peer's tracker does) and
  // notes its last round and its last finished epoch's loss.
  void merge(const ProgressRecord &r);
  SwarmSnapshot snapshot(int64_t now_ms, size_t max_rounds = 8) const;

  // One epoch's swarm-wide loss: the mean of the peers' epoch means,
  // weighted by their windows, over the finite ones.
  struct EpochLoss {
    int64_t epoch = 0;
    std::optional<double> mean;  // none when no peer reported a finite loss
    size_t peers = 0;            // peers that reported this epoch
    uint64_t windows = 0;
    size_t nonfinite = 0;        // peers whose epoch loss was NaN or infinite
  };
  // The epochs below `before` not yet taken, oldest first; each is taken
  // once. An epoch is complete once the swarm is two epochs past it (every
  // peer then reports it in its record); flush takes everything.
  std::vector<EpochLoss> take_losses(int64_t before);
  std::vector<EpochLoss> take_all_losses() { return take_losses(INT64_MAX); }
  // Epochs at or below this are never taken (already in the CSV file).
  void skip_losses_through(int64_t epoch) { losses_taken_through_ = epoch; }

 private:
  Tracker tracker_;
  std::map<std::pair<int64_t, uint64_t>, ObservedRound> rounds_;
  struct PeerLoss {
    double loss = 0;
    uint32_t windows = 0;
  };
  std::map<int64_t, std::map<uint64_t, PeerLoss>> losses_;  // epoch -> peer -> its mean
  int64_t losses_taken_through_ = -1;
};

// The swarm status CSV (`--csv FILE`): appended to, one row per epoch.
class LossCsv {
 public:
  static constexpr const char *kHeader = "epoch,mean_loss,peers,windows,nonfinite_peers,time_ms";
  // Opens path for appending, writing the header when the file is new or
  // empty. false with *why when it cannot be written, or when it holds
  // something other than this CSV (its first line is not kHeader).
  // *last_epoch: the last epoch it already holds (-1: none).
  bool open(const std::string &path, int64_t *last_epoch, std::string *why);
  // Appends and flushes the rows; false with *why when writing failed.
  bool append(const std::vector<SwarmObserver::EpochLoss> &rows, int64_t time_ms, std::string *why);

 private:
  std::string path_;
};

// The snapshot as one line of JSON (ids as decimal strings: they are 64-bit).
std::string snapshot_json(const SwarmSnapshot &s, const std::string &run_id);
// The snapshot as a table for people.
std::string snapshot_text(const SwarmSnapshot &s, const std::string &run_id);

}  // namespace loom_collab

#endif
