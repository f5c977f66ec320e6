/* SPDX-License-Identifier: Apache-2.0 */
// Sampled progress: how a large swarm spreads its progress records over DHT
// keys so that what one read costs does not grow with the swarm.
//
// A swarm of up to about 2 * per_shard peers keeps every record under one
// key (level 0, records.h's progress_key), and each read sees every peer, as
// hivemind's progress tracker does. Above that, records go to 2^level keys
// (shards), a peer's shard picked by its id, with per_shard to 2 * per_shard
// records in each. A read then gets this peer's own shard and one other, in
// turn, and the swarm's totals are scaled up from what those two hold (the
// tracker's SampledProgress): a read costs at most about 4 * per_shard
// records at any size, where it cost every peer's record before, and the
// nodes holding one key serve per_shard peers' reads, not the swarm's.
//
// Peers agree on the level without talking: each estimates the swarm's size
// from the shards it reads, a reader keeps its level until its estimate
// leaves the level's range by a fifth (hysteresis), and a writer puts its
// record on every level a reader whose estimate is within half of its own
// could be at (two levels near a boundary, one elsewhere). Estimates vary
// between peers by far less than that while the swarm grows or shrinks.
#ifndef LOOM_COLLAB_PROGRESS_SHARDS_H
#define LOOM_COLLAB_PROGRESS_SHARDS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom_collab {

constexpr int kMaxShardLevel = 12;  // 4,096 shards: 131,072 peers and more at the default 32 a shard

// The level whose shards hold per_shard to 2 * per_shard of `peers`
// records: floor(log2(peers / per_shard)), 0 to kMaxShardLevel.
int shard_level(double peers, uint64_t per_shard);
// The levels a writer whose estimate is `peers` puts its record on,
// ascending: one, or two near a level boundary.
std::vector<int> write_levels(double peers, uint64_t per_shard);
// The shard of peer_id at level (0 at level 0): the top `level` bits of a
// mix of the id, so that ids spread evenly and a shard's peers at level + 1
// are half of one shard at level.
uint32_t shard_of(uint64_t peer_id, int level);
// The DHT key of a shard: level 0 is progress_key(run_id) itself.
std::string progress_shard_key(const std::string &run_id, int level, uint32_t shard);

// One peer's side of it: which shards to read next, the swarm's size as
// estimated from what they held, the level that follows. Pure bookkeeping,
// no I/O; used from the peer's background thread only.
class ShardPlan {
 public:
  ShardPlan(uint64_t me, uint64_t per_shard) : me_(me), per_shard_(per_shard < 1 ? 1 : per_shard) {}

  int level() const { return level_; }
  // Shards to read now: this peer's own, and at level 1 and up one other,
  // each in turn from a place that depends on this peer's id.
  std::vector<uint32_t> next_reads();
  // Levels above this one to look at now (this peer's shard on each). A
  // joiner's first read looks at every level: a swarm whose records are
  // on a higher level leaves level 0 empty, which says nothing. So does the
  // first read after the level fell to 0: reads that came back empty
  // (failed, or their records aged past the horizon on a loaded machine)
  // say little more, and level 0, which the others no longer write, kept
  // such a peer blind (64-peer run 27: one fell from level 1 to 0 within a
  // second and saw itself alone for a minute, 121 records held). After
  // that, while this peer sees fewer than per_shard peers, every
  // kProbeEvery-th read looks one level up, in turn (a first read can
  // miss), or every level while it sees nobody at all. (Falls to a level
  // above 0 probe nothing: probing after every fall made peers of a
  // simulated 2,000 swarm swing between two levels below the swarm's.)
  std::vector<int> next_probes();
  static constexpr uint64_t kProbeEvery = 16;
  // Whether the next probes may not wait (a first read, or a fall): a peer
  // that reads other peers' tables otherwise spaces its DHT probes out.
  bool probe_now() const { return reads_ <= 1 || fell_; }
  // Whether a read has placed this peer on a level: until then it puts its
  // record nowhere (levels_to_write is empty), not on level 0 where a large
  // swarm's readers would not see it and a small one's would count it twice.
  bool placed() const { return reads_ > 0; }
  // What a read of (level, shard) at now_ms found: `records` live records
  // (this peer's own not among them). A read of the current level counts
  // towards the estimate; one of a higher level (a probe) that found at
  // least two records moves this peer there if that says the swarm is
  // larger; reads of a lower level (made before it changed) are ignored.
  void saw(int level, uint32_t shard, uint64_t records, int64_t now_ms);
  // The swarm's size, this peer included: at level 0 exactly what the one
  // key held; above, 2^level times the mean count of the shards read within
  // the last max_age_ms. Moves the level up when the estimate leaves its
  // range above, down once it has stayed below for kFallAfterMs: on a
  // loaded machine a few reads come back short (a DHT get cut at its
  // timeout, records aged past the horizon), and a level fallen to where
  // the others no longer write sees nobody (64-peer run 28: 58 of 143
  // peers' logs fell to level 0). A swarm that shrank is in no hurry: a
  // level too high reads the same number of keys, each holding fewer.
  double peers(int64_t now_ms, int64_t max_age_ms);
  static constexpr int64_t kFallAfterMs = 10000;
  // Where this peer's record goes: write_levels of its estimate, plus the
  // level it reads at (its own shard must hold it).
  std::vector<int> levels_to_write(double peers) const;

 private:
  uint64_t me_, per_shard_;
  int level_ = 0;
  uint64_t turn_ = 0, reads_ = 0, probes_ = 0;
  double last_peers_ = 1;
  bool fell_ = false;         // the level fell to 0 since the last probes
  int64_t low_since_ms_ = -1;  // since when the estimate has been below the level's range
  struct Seen {
    uint64_t records = 0;
    int64_t at_ms = 0;
  };
  std::map<uint32_t, Seen> seen_;  // shard -> its latest read, at level_
};

}  // namespace loom_collab

#endif
