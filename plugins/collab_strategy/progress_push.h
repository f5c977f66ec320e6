/* SPDX-License-Identifier: Apache-2.0 */
// Push-pull progress: a reader pushes its own record with each progress
// request (state_transfer.h's kStateFlagProgressPush), so that records
// spread from peer to peer and DHT reads of progress can be rare. This
// holds both sides' part outside the record's checks, which take_progress
// does as for any record: the reader's wrapping (sealed under the swarm
// key, if any) and the server's queue, filled on the state server's thread
// and drained by the peer's background thread.
#ifndef LOOM_COLLAB_PROGRESS_PUSH_H
#define LOOM_COLLAB_PROGRESS_PUSH_H

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "records.h"
#include "../common/swarm_key.h"

namespace loom_collab {

class Sealer;

// What a peer keeps to read progress from other peers between DHT reads
// (progress_source = "peers", peer_progress.cpp): background thread only.
struct PeerReads {
  // Each peer's latest merged record as it came (its time, its bytes): what
  // this peer's state server hands readers after its own.
  std::map<uint64_t, std::pair<int64_t, Bytes>> raw_records;
  int64_t last_share_ms = 0;
  uint64_t last_shared_samples = 0;
  std::map<std::string, int64_t> last_dht_read_ms;  // per progress key
  int64_t last_probe_ms = 0;                        // of another level's key
  std::map<uint64_t, int64_t> pull_failed;          // peer id -> not asked before this time
  uint64_t dht_reads = 0, pulls = 0, pull_failures = 0, pull_bytes = 0;  // for the log at exit
  // Why keys were read from the DHT rather than from a peer's table (the
  // log at exit): the key's interval was due (or tables are not read at
  // this size), no known peer writes to it, the table's peer failed, a
  // probe of another level. And the interval's range, which follows the
  // swarm's estimated size.
  uint64_t keys_due = 0, keys_nobody = 0, keys_failed = 0, keys_probed = 0;
  uint64_t stale_pulls = 0;  // tables asked of peers whose records were past the live horizon
  int64_t shortest_interval_ms = 0, longest_interval_ms = 0;
  uint64_t pull_seed = 0;
};

// A peer a read may pull a progress table from.
struct PullCandidate {
  uint64_t id = 0;
  std::string host;
  uint16_t port = 0;
};

// Whose table a read of key (level, shard) may pull: the full peers that
// write to that key, other than `me` and those whose last pull failed less
// than their backoff ago (failed: peer id -> not asked before this time).
// From the live records; when none of them qualifies, from every record
// held (`held()`, built only then: a read comes every second or so),
// whose peers most often still run (a dead one fails and backs off), and
// *stale says so. A view with no live record otherwise
// pulled from nobody, and at 64 peers starting on 2 cores saw the swarm as
// itself alone (run 25: 63 records held, the youngest 20 to 83 s old).
std::vector<PullCandidate> pull_candidates(const std::vector<ProgressRecord> &live,
                                           const std::function<std::vector<ProgressRecord>()> &held, uint64_t me,
                                           int level, uint32_t shard, const std::map<uint64_t, int64_t> &failed,
                                           int64_t now_ms,
                                           bool *stale);

class ProgressPush {
 public:
  // A queue this long drops its oldest: pushes come at most
  // kProgressPerMinute per address (serve_guard), and the background
  // thread drains it every 50 ms.
  static constexpr size_t kMaxQueued = 256;

  ProgressPush(uint64_t run, const std::optional<loom_key::SwarmKey> &key);
  ~ProgressPush();

  // What a reader pushes of its encoded record: the bytes themselves, or
  // sealed with the swarm key (bound to the run) in a keyed swarm.
  Bytes wrap(const Bytes &record) const;
  // The server's side: queues what a request pushed (any thread).
  void receive(Bytes pushed);
  // The records queued since the last call, opened; what does not open
  // (not sealed with this swarm's key for this run) is dropped and counted.
  std::vector<Bytes> take();

  uint64_t received() const { return received_.load(); }
  uint64_t unopened() const { return unopened_.load(); }      // dropped: sealed with another key, or garbage
  uint64_t overflowed() const { return overflowed_.load(); }  // dropped: the queue was full

 private:
  Bytes ad() const;
  uint64_t run_;
  std::unique_ptr<Sealer> sealer_;
  std::mutex m_;
  std::deque<Bytes> queue_;  // guarded by m_
  std::atomic<uint64_t> received_{0}, unopened_{0}, overflowed_{0};
};

}  // namespace loom_collab

#endif
