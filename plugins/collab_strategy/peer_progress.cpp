// SPDX-License-Identifier: Apache-2.0
// A peer's progress (peer.h): its record, published in the DHT, and the
// background thread that reads the others' (sampled in a large swarm,
// progress_shards.h) into the tracker.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "peer.h"
#include "thread_name.h"

namespace loom_collab {

namespace {

constexpr int64_t kSampleRefreshMs = 50;             // sample counts alone: at most twenty puts a second
constexpr int64_t kShardMaxAgeMs = 5000;             // shard reads the swarm's size is estimated from
constexpr int64_t kIntroduceMs = 2000;               // how often known peers are checked in the DHT's table
constexpr int64_t kForgetAddressMs = 5 * 60 * 1000;  // a peer unseen this long is not introduced again
// progress_source = "peers": the swarm's DHT reads of progress, all peers
// together, about this many a second (each peer's interval grows with the
// swarm's size), from kMinDhtReadMs to kMaxDhtReadMs apart per peer. Reads
// in between ask a peer's state server and push the reader's own record
// there (progress_push.h), so records spread from peer to peer, a joiner's
// from its first pull on; the DHT reads are what a peer that knows nobody
// yet starts from, and what joins two parts of a swarm that never met. At
// 4 a second (before pushes), a peer of 16 read the DHT every 4 s, and
// those reads and their replies were most of its 370 datagrams a second.
constexpr double kDhtReadsPerSecond = 0.5;
// progress_source = "auto": peers' tables from this swarm size on. Below it
// a DHT read costs little (16 (N + 1) datagrams), and a new peer is seen at
// the next read of any peer: a joiner that reads a table at once still
// reads the others' DHT copies first, which pulls leave up to
// kPushRepublishMs old. Tried at 2 (2026-12-05): at 4 peers it cut the DHT
// datagrams (938 a second per peer with DHT reads alone), but 9 swarm tests
// of joiners, clients and observers in 3-peer swarms that finish in 4 s
// failed (a joiner took the DHT's epoch-0 copies for the swarm's epoch and
// trained alone); not pursued further.
constexpr double kPullMinPeers = 8;
constexpr int64_t kMinDhtReadMs = 1000;
// Pushes carry every reader's record, so DHT reads only find a first peer
// and join parts of a swarm that never met: at 1,000 peers a read of two
// keys costs about 2,000 datagrams, 17 a second at this cap against 67 at
// the 30 s it was (README, "Push-pull progress").
constexpr int64_t kMaxDhtReadMs = 120000;
// Reads that ask peers come at most this often (besides the read at each
// epoch change): they cost so little that, spaced by the time to the target
// alone (10 ms to 1 s), they came 11.4 a second per peer at 16 peers, 50 kB/s
// (bench/swarm_scale.py), where the estimate gains little past a few a second.
// At 16 peers; a smaller swarm's tables are smaller, and reads of them
// come as often as kPullMsPerPeer per peer (3 peers: 38 ms): at 200 ms a
// joiner of a 3-peer swarm saw the others 20 digits epochs late and never
// met them in a round.
constexpr int64_t kMinPullIntervalMs = 200;
constexpr double kPullMsPerPeer = 12.5;

}  // namespace

// ---- Progress ---------------------------------------------------------------

ProgressRecord Peer::own_record() const {
  ProgressRecord r;
  r.peer_id = id_;
  r.epoch = epoch_.load();
  r.samples = samples_.load();
  r.samples_per_second = rate_.load();
  r.time_ms = wall_ms();
  r.flags = flags_.load() | (server_ && server_->active() > 0 ? ProgressRecord::kServing : 0) |
            (opt_.checkpointer ? ProgressRecord::kCheckpointer : 0) |
            (opt_.client_mode ? ProgressRecord::kClient : 0) |
            (unhealthy_ ? ProgressRecord::kUnhealthy : 0);
  r.state_host = announce_host_;
  r.state_port = server_ ? server_->port() : 0;
  r.fingerprint = fingerprint_;
  r.since_ms = since_ms_;
  r.target_batch_size = std::max<uint64_t>(1, opt_.target_batch_size);
  report_.fill(&r);
  {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    r.sync_epoch = sync_epoch_;
    r.sync_hash = sync_hash_;
    r.earlier_syncs = earlier_syncs_;
  }
  return r;
}

int64_t Peer::newest_epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t newest = -1;
  for (const auto &r : tracker_.live_records(wall_ms()))
    if (r.peer_id != id_ && !(r.flags & ProgressRecord::kAway)) newest = std::max(newest, r.epoch);
  return newest;
}

SwarmView Peer::view() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tracker_.view(id_, epoch_.load(), samples_.load(), rate_.load(), wall_ms(), epoch_start_ms_.load(),
                       sample_ ? &*sample_ : nullptr);
}

size_t Peer::peers_seen() const { return peers_seen(view()); }

int64_t Peer::live_ms() const { return shards_ && shards_->level() > 0 ? kRecordTtlMs : kRecordLiveMs; }

size_t Peer::peers_seen(const SwarmView &v) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::max(v.peers, 1 + tracker_.recent_peers(id_, wall_ms(), kRecordTtlMs));
}

void Peer::wake_background() {
  std::lock_guard<std::mutex> lock(mutex_);
  wake_now_ = true;
  wake_.notify_all();
}

void Peer::refresh() {
  const int64_t start = wall_ms();
  for (auto it = foreign_.begin(); it != foreign_.end();) {  // peers of another model that left or expired
    const bool gone = (it->second.flags & ProgressRecord::kLeft) || start - it->second.time_ms > kRecordTtlMs;
    it = gone ? foreign_.erase(it) : std::next(it);
  }
  // Sampled progress (progress_shards.h): this peer's shard and, in a large
  // swarm, one other; in a small one the one key that holds every record.
  if (!shards_) shards_.emplace(id_, uint64_t(opt_.progress_shard_peers));
  const int level = shards_->level();
  struct Read {
    int level;
    uint32_t shard;
    std::vector<Bytes> values;
    bool pulled = false;
  };
  std::vector<Read> reads;
  for (uint32_t shard : shards_->next_reads()) reads.push_back({level, shard, {}});
  // Between DHT reads, the records a peer writing to the key holds, from
  // its state server: one request where the DHT read costs 16 (N + 1)
  // datagrams. A probe of another level always asks the DHT (nobody may
  // write there).
  const int64_t dht_every = dht_read_interval_ms();
  const bool from_peers = progress_from_peers_now();
  if (from_peers) {
    reads_.shortest_interval_ms =
        reads_.shortest_interval_ms ? std::min(reads_.shortest_interval_ms, dht_every) : dht_every;
    reads_.longest_interval_ms = std::max(reads_.longest_interval_ms, dht_every);
  }
  std::vector<size_t> from_dht;
  std::vector<Read> kept;
  for (size_t i = 0; i < reads.size(); ++i) {
    const std::string name = progress_shard_key(opt_.run_id, reads[i].level, reads[i].shard);
    if (from_peers && start - reads_.last_dht_read_ms[name] < dht_every) {
      bool nobody = false;
      if (auto got = pull_progress(reads[i].level, reads[i].shard, &nobody)) {
        reads[i].values = std::move(*got);
        reads[i].pulled = true;
        kept.push_back(std::move(reads[i]));
        continue;
      }
      // Nobody to ask yet under the one key (a peer alone, waiting for
      // min_peers): it is left until its next DHT read, and pushes bring
      // the others meanwhile. Read at every idle read instead, a waiting
      // peer's reads were nearly all DHT reads. (A sampled shard nobody
      // known writes to is still read: its count feeds the estimate.)
      if (nobody && reads[i].level == 0) continue;
      ++(nobody ? reads_.keys_nobody : reads_.keys_failed);
    } else {
      ++reads_.keys_due;
    }
    from_dht.push_back(kept.size());
    kept.push_back(std::move(reads[i]));
  }
  reads = std::move(kept);
  // Probes too are DHT reads: while peers' tables bring the records, at
  // most one a dht_every (counted by reads, they came every 4 s at 16 peers).
  if (!from_peers || shards_->probe_now() || start - reads_.last_probe_ms >= dht_every) {
    for (int probe : shards_->next_probes()) {
      from_dht.push_back(reads.size());
      reads.push_back({probe, shard_of(id_, probe), {}});
      reads_.last_probe_ms = start;
      ++reads_.keys_probed;
    }
  }
  if (!from_dht.empty()) {
    std::vector<std::string> names;
    for (size_t i : from_dht) names.push_back(progress_shard_key(opt_.run_id, reads[i].level, reads[i].shard));
    // One round trip for all of them (a probe is a get of a key nobody may
    // write: it must not add its time to the read).
    auto found = dht_->get_many(names, std::chrono::milliseconds(500));
    for (size_t j = 0; j < from_dht.size(); ++j) {
      reads[from_dht[j]].values = std::move(found[j]);
      reads_.last_dht_read_ms[names[j]] = start;
    }
    ++reads_.dht_reads;
  }
  if (!reads.empty()) ++progress_reads_;
  std::vector<uint64_t> fresh;
  uint64_t kept_here = 0;  // the records this level's reads held (take_progress's count)
  for (const auto &r : reads) {
    std::vector<uint64_t> ids;
    const uint64_t kept = take_progress(r.values, r.level == level ? &ids : nullptr, r.pulled);
    records_read_ += r.values.size();
    shards_->saw(r.level, r.shard, kept, wall_ms());
    if (r.level == level) kept_here += kept;
    fresh.insert(fresh.end(), ids.begin(), ids.end());
  }
  const double estimate = shards_->peers(wall_ms(), kShardMaxAgeMs);
  swarm_estimate_ = estimate;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tracker_.set_ttl_ms(live_ms());
  }
  if (shards_->level() != logged_level_) {
    const int now_level = shards_->level();
    if (now_level > 0)
      log(Level::info, "the swarm has about " + std::to_string(std::llround(estimate)) +
                           " peers: progress records are spread over " + std::to_string(1u << now_level) +
                           " keys (level " + std::to_string(now_level) + ", progress_shard_peers = " +
                           std::to_string(opt_.progress_shard_peers) +
                           "); each read gets this peer's key and one other, and scales them up (sampled progress)");
    else if (logged_level_ > 0)
      log(Level::info, "the swarm has about " + std::to_string(std::llround(estimate)) +
                           " peers: progress records are under one key again, and every read sees every peer");
    logged_level_ = now_level;
  }
  {
    std::sort(fresh.begin(), fresh.end());
    fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
    std::lock_guard<std::mutex> lock(mutex_);
    // The sample's swarm is the live part of the estimate (sampled_swarm).
    if (level > 0 && shards_->level() == level) {
      const double peers = sampled_swarm(estimate, fresh.size(), kept_here);
      sample_ = SampledProgress{std::move(fresh), peers};
    } else if (shards_->level() == 0) sample_.reset();
  }
  // Keep every peer seen lately in the DHT's routing table (its state server
  // listens on its DHT node's port number whenever that was free).
  const int64_t now = wall_ms();
  if (now - last_introduce_ms_ >= kIntroduceMs) {
    last_introduce_ms_ = now;
    std::vector<std::pair<std::string, uint16_t>> peers;
    for (auto it = addresses_.begin(); it != addresses_.end();) {
      if (now - it->second.seen_ms > kForgetAddressMs) {
        it = addresses_.erase(it);
        continue;
      }
      peers.emplace_back(it->second.host, it->second.port);
      ++it;
    }
    dht_->introduce(peers);
  }
  observe_swarm_epoch(wall_ms());
  if (opt_.progress_source != Options::ProgressSource::dht) share_progress(wall_ms());
  std::vector<ProgressRecord> foreign;
  for (const auto &[id, r] : foreign_)
    if (!(r.flags & ProgressRecord::kLeft)) foreign.push_back(r);
  check_model(foreign);
  serve_model();
}

void Peer::observe_swarm_epoch(int64_t now_ms) {
  int64_t g;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    g = tracker_.global_epoch(id_, epoch_.load(), now_ms);
  }
  if (seen_epoch_ < 0 || g < seen_epoch_) {
    seen_epoch_ = g;
    seen_epoch_ms_ = now_ms;
    return;
  }
  if (g == seen_epoch_) return;
  const double per = double(now_ms - seen_epoch_ms_) / double(g - seen_epoch_);
  const double old = swarm_epoch_ms_.load();
  swarm_epoch_ms_ = old > 0 ? 0.7 * old + 0.3 * per : per;
  seen_epoch_ = g;
  seen_epoch_ms_ = now_ms;
}

bool Peer::progress_from_peers_now() const {
  return opt_.progress_source == Options::ProgressSource::peers ||
         (opt_.progress_source == Options::ProgressSource::automatic && swarm_estimate_.load() >= kPullMinPeers);
}

int64_t Peer::dht_read_interval_ms() const {
  return std::clamp<int64_t>(int64_t(1000.0 * swarm_estimate_.load() / kDhtReadsPerSecond), kMinDhtReadMs,
                             kMaxDhtReadMs);
}

uint64_t Peer::take_progress(const std::vector<Bytes> &values, std::vector<uint64_t> *ids, bool pulled) {
  uint64_t kept = 0;
  const bool merge = ids != nullptr;
  const int64_t now = wall_ms();
  for (const auto &raw : values) {
    std::string reason;
    auto r = verified_.decode(run_, raw.data(), raw.size(), &reason);
    if (!r) {
      if (reason.find("forged") != std::string::npos || reason.find("bad signature") != std::string::npos) {
        // Someone speaking for another peer. Its ids are the sender's to
        // choose, so one key for all: said once a minute, with a count.
        log_limited(Level::warn, "forged record", "rejected a progress record: " + reason);
        continue;
      }
      // Logged once per kind of defect (the reason up to its numbers), then
      // counted: a peer sending garbage must not flood the log.
      const std::string kind = reason.substr(0, reason.find_first_of("(:0123456789"));
      if (rejected_[kind]++ == 0)
        log(Level::warn, "rejected a progress record: " + reason + " (more of this kind are dropped silently)");
      continue;
    }
    if (r->peer_id == id_) continue;
    // The swarm's size counts every record the DHT still keeps (a peer
    // puts its copy every kPushRepublishMs, and the copy lives
    // kRecordTtlMs), not the live horizon: on a loaded machine copies age
    // past it, and at 64 peers on 2 cores the estimate fell to 8 or less
    // (of 64), below kPullMinPeers, so that every read went to the DHT:
    // 0.26 DHT reads a second per peer (median) where one per 120 s was
    // designed (64-peer churn run 17). Live records alone are the sample (ids).
    const RecordCount counts = count_record(*r, now, live_ms(), kRecordTtlMs);
    const bool alive = counts.live;
    if (counts.in_size) ++kept;
    // A probe of another level only counts: a peer that writes two levels
    // may have left an older copy on the other, which is no replay.
    if (!merge) continue;
    if (r->fingerprint != fingerprint_) {
      // Another model under this run id: never counted, grouped or loaded
      // from; said once a minute (check_model decides who must go).
      auto &seen = foreign_[r->peer_id];
      if (r->time_ms >= seen.time_ms) seen = *r;
      if (!(r->flags & ProgressRecord::kLeft))
        log_limited(Level::warn, "foreign model",
                    "peer " + std::to_string(r->peer_id) + " announces run '" + opt_.run_id +
                        "' but trains another model (its fingerprint differs); it is ignored");
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!tracker_.merge(*r)) {
      if (pulled) {
        // The reader holds a newer copy: the peer is as alive as that says.
        lock.unlock();
        if (alive) ids->push_back(r->peer_id);
        continue;
      }
      // Refused either way. An older copy that a node may still hold (a
      // put lives kRecordTtlMs; a level this peer reads no more keeps one
      // till then) is no attack: said only in verbose logs. One older than
      // any node keeps was put again by someone: a replay. Once a minute
      // each (one key: whoever replays may mint identities).
      const int64_t newer = tracker_.newest(r->peer_id);
      lock.unlock();
      const int64_t age = now - r->time_ms;
      const std::string what = "progress record of peer " + std::to_string(r->peer_id) + " made " +
                               std::to_string(newer - r->time_ms) + " ms before one already seen from it";
      if (age <= kRecordTtlMs + kClockSlackMs)
        log_limited(opt_.verbose ? Level::info : Level::debug, "stale record",
                    "refused an older copy of a " + what + " (a DHT node, or a key this peer reads no more, keeps "
                    "one until it expires)");
      else
        log_limited(Level::warn, "replayed record",
                    "rejected a " + what + " and " + std::to_string(age / 1000) + " s ago, longer than any node keeps " +
                        "one (" + std::to_string(kRecordTtlMs / 1000) + " s): someone puts old records again (a replay)");
      continue;
    }
    lock.unlock();
    if (alive) ids->push_back(r->peer_id);
    // What this peer's server hands readers (share_progress prunes it).
    if (opt_.progress_source != Options::ProgressSource::dht) reads_.raw_records[r->peer_id] = {r->time_ms, raw};
    if (r->state_port != 0 && !r->state_host.empty()) {
      if (r->flags & ProgressRecord::kLeft) addresses_.erase(r->peer_id);
      else addresses_[r->peer_id] = {r->state_host, r->state_port, wall_ms()};
    }
  }
  return kept;
}

void Peer::publish(bool force) {
  ProgressRecord r = own_record();
  const int64_t now = r.time_ms;
  // What others decide on goes out at once: an epoch, a flag (loading,
  // unhealthy, serving, leaving), a sync point. Sample counts alone go at
  // most every kSampleRefreshMs: readers extrapolate them at the published
  // rate meanwhile (tracker.cpp). With progress from peers they go only to
  // this peer's state server and pushes that often (its readers get the
  // newest); the DHT gets them every kPushRepublishMs.
  const bool event = r.epoch != last_published_epoch_ || r.flags != last_published_flags_ ||
                     r.sync_epoch != last_published_sync_epoch_;
  const bool samples = r.samples != last_published_samples_ && now - last_publish_ms_ >= kSampleRefreshMs;
  const bool shared_samples = r.samples != reads_.last_shared_samples && now - reads_.last_share_ms >= kSampleRefreshMs;
  // The server gets the newest record whenever others may ask it (also
  // under "auto" in a small swarm: its first reads from peers, once it has
  // grown, find it there), the DHT only every kRepublishMs while others do.
  const bool to_server = opt_.progress_source != Options::ProgressSource::dht && server_ != nullptr;
  const bool to_peers = to_server && progress_from_peers_now();
  // Pulls push this record (progress_push.h), so readers have each event
  // from its server or its pushes; the DHT copy is only what a joiner's
  // first read finds, put every kPushRepublishMs (live for kRecordLiveMs)
  // and at a new epoch at most every kRepublishMs.
  const bool pushes = progress_from_peers_now() && (to_server || opt_.client_mode);
  // The levels a record goes on follow the swarm's estimated size
  // (progress_shards.h); a move to another level is an event too.
  std::vector<int> levels{0};
  if (shards_) levels = shards_->levels_to_write(swarm_estimate_.load());
  const bool moved = levels != written_levels_;
  // While pulls push, a new epoch still reaches the DHT within
  // kRepublishMs: a joiner's first read decides its catch-up from there
  // (a fast swarm's copies 4 s old sent a joiner to epoch 0, alone).
  const bool new_epoch = r.epoch != dht_copy_epoch_ && now - last_publish_ms_ >= kRepublishMs;
  const bool put = pushes ? force || moved || new_epoch || now - last_publish_ms_ >= kPushRepublishMs
                          : force || event || moved || now - last_publish_ms_ >= kRepublishMs || (samples && !to_peers);
  const bool fresh = put || event || shared_samples;
  const bool share = to_server && fresh;
  const bool push = pushes && push_ && fresh;
  if (!put && !share && !push) return;
  const Bytes bytes = encode(run_, r, identity_);
  if (push) own_push_ = push_->wrap(bytes);  // with this peer's next pull
  if (share) server_->publish_own_progress(id_, bytes);  // the others' records go with reads (share_progress)
  if (share || push) {
    reads_.last_share_ms = now;
    reads_.last_shared_samples = r.samples;
  }
  if (pushes) {  // an event is out (server, pushes): said once
    last_published_epoch_ = r.epoch;
    last_published_flags_ = r.flags;
    last_published_sync_epoch_ = r.sync_epoch;
  }
  if (!put) return;
  // Each put waits for the nodes (up to 1 s): on a loaded machine that
  // paces this loop to what the DHT can take. Sent without waiting, 64
  // peers on 2 cores saw each other less, not more (estimates of 18-22
  // against 39-53 of 64).
  for (int level : levels)
    dht_->put(progress_shard_key(opt_.run_id, level, shard_of(id_, level)), id_, bytes, kRecordTtl,
              std::chrono::milliseconds(1000));
  written_levels_ = levels;
  dht_copy_epoch_ = r.epoch;
  last_published_epoch_ = r.epoch;
  last_published_samples_ = r.samples;
  last_published_flags_ = r.flags;
  last_published_sync_epoch_ = r.sync_epoch;
  last_publish_ms_ = now;
}

int64_t Peer::read_interval_ms() const { return loom_collab::read_interval_ms(view(), opt_.target_batch_size); }

void Peer::background() {
  name_this_thread("collab-bg");
  int64_t last_read_ms = 0, read_epoch = -1;
  while (!stop_) {
    bool woken = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return wake_now_ || stop_.load(); });
      woken = wake_now_;
      wake_now_ = false;
    }
    if (stop_) break;
    try {
      // progress_reads = "eta" (the default): puts for events, sample
      // counts every 50 ms, reads by the time to the target (tracker.h's
      // read_interval_ms). "every_step": every wake (the training thread
      // wakes it each step) puts this peer's record and reads the others'.
      const bool by_eta = opt_.progress_reads_eta;
      publish(woken && !by_eta);
      publish_fingerprint();
      take_pushed();
      const int64_t now = wall_ms();
      // A new epoch of this peer's (a round, a load) reads at once: what it
      // decides next depends on where the others are.
      const int64_t interval =
          progress_from_peers_now()
              ? std::max(read_interval_ms(),
                         std::clamp<int64_t>(int64_t(kPullMsPerPeer * swarm_estimate_.load()), kMinReadIntervalMs,
                                             kMinPullIntervalMs))
              : read_interval_ms();
      if (!by_eta || epoch_.load() != read_epoch || now - last_read_ms >= interval) {
        read_epoch = epoch_.load();
        last_read_ms = now;
        refresh();
      }
      check_announced_address();
      say_if_quiet(wall_ms(), last_read_ms);
    } catch (const std::exception &e) {
      log(Level::warn, std::string("swarm background update failed: ") + e.what());
    }
  }
}

}  // namespace loom_collab
