// SPDX-License-Identifier: Apache-2.0
#include "tracker.h"

#include <algorithm>
#include <cmath>

namespace loom_collab {

std::vector<uint64_t> SwarmView::training_at(int64_t epoch) const {
  std::vector<uint64_t> out;
  for (const auto &r : others)
    if (r.epoch == epoch && !(r.flags & (ProgressRecord::kAway | ProgressRecord::kClient))) out.push_back(r.peer_id);
  return out;
}

std::vector<uint64_t> SwarmView::training_near(int64_t epoch, int64_t behind) const {
  std::vector<uint64_t> out;
  for (const auto &r : others)
    if (r.epoch <= epoch && r.epoch >= epoch - behind && !(r.flags & (ProgressRecord::kAway | ProgressRecord::kClient)))
      out.push_back(r.peer_id);
  return out;
}

std::vector<uint64_t> SwarmView::accumulating_at(int64_t epoch) const {
  std::vector<uint64_t> out;
  for (const auto &r : others)
    if (r.epoch == epoch && !(r.flags & (ProgressRecord::kAway | ProgressRecord::kClient)) &&
        (r.samples > 0 || r.samples_per_second > 0))
      out.push_back(r.peer_id);
  return out;
}

bool SwarmView::others_train_near(int64_t epoch, int64_t behind) const {
  return std::any_of(others.begin(), others.end(), [&](const ProgressRecord &r) {
    return r.epoch >= epoch - behind && !(r.flags & (ProgressRecord::kAway | ProgressRecord::kClient));
  });
}

int64_t read_interval_ms(const SwarmView &v, uint64_t target) {
  // Reached: this peer enters a round at its next step and decides nothing
  // more on the others' records until its epoch changes (which reads at once).
  if (v.samples >= target) return kReachedReadIntervalMs;
  // Nobody accumulates (a swarm waiting for min_peers, or between rounds):
  // nothing is decided soon, but the peer that completes min_peers should be
  // seen before the others are far ahead; a large swarm reads less often.
  if (!(v.rate > 0))
    return std::clamp<int64_t>(kIdleReadMsPerPeer * int64_t(v.peers), kMinIdleReadIntervalMs, kMaxReadIntervalMs);
  const double eta_ms = 1000.0 * double(target - v.samples) / v.rate;
  return std::clamp<int64_t>(int64_t(eta_ms / 8), kMinReadIntervalMs, kMaxReadIntervalMs);
}

ResyncPlan plan_resync(int64_t own_epoch, int64_t swarm_epoch, int64_t average_state_every, double epoch_seconds,
                       double load_state_timeout) {
  ResyncPlan p;
  p.load_epoch = swarm_epoch;
  if (average_state_every <= 0 || swarm_epoch % average_state_every == 0) return p;
  const int64_t last_sync = swarm_epoch - swarm_epoch % average_state_every;
  // Twice the compute time the rate gives: rounds add matchmaking and
  // averaging (at 64 peers on 2 cores, epochs of 35 s against 10 s).
  const double to_next = 2.0 * double(last_sync + average_state_every - swarm_epoch) * epoch_seconds;
  const bool near = epoch_seconds > 0 && std::isfinite(epoch_seconds) && to_next <= load_state_timeout / 2;
  if (near) return p;
  p.load_epoch = last_sync > own_epoch ? last_sync : -1;
  p.follow_to = swarm_epoch;
  return p;
}

double epoch_seconds_by_lifetimes(const std::vector<ProgressRecord> &records) {
  double longest = 0;
  for (const auto &r : records) {
    if (r.epoch <= 0 || r.since_ms <= 0 || r.time_ms <= r.since_ms) continue;
    longest = std::max(longest, double(r.time_ms - r.since_ms) / 1000.0 / double(r.epoch));
  }
  return longest;
}

bool Tracker::merge(const ProgressRecord &r) {
  auto it = peers_.find(r.peer_id);
  if (it != peers_.end() && it->second.time_ms > r.time_ms) return false;
  peers_[r.peer_id] = r;
  if (r.sync_hash != 0) {
    auto &history = syncs_[r.peer_id];
    history[r.sync_epoch] = r.sync_hash;
    for (const auto &s : r.earlier_syncs) history[s.epoch] = s.hash;
    while (history.size() > kSyncHistory) history.erase(history.begin());
  }
  return true;
}

std::optional<uint64_t> SyncVotes::majority() const {
  for (const auto &[hash, n] : votes)
    if (2 * n > others) return hash;
  return std::nullopt;
}

std::optional<uint64_t> SyncVotes::leader() const {
  std::optional<uint64_t> best;
  size_t most = 0;
  bool tie = false;
  for (const auto &[hash, n] : votes) {
    if (n > most) {
      most = n;
      best = hash;
      tie = false;
    } else if (n == most) {
      tie = true;
    }
  }
  if (tie) return std::nullopt;
  return best;
}

SyncVotes Tracker::sync_votes(int64_t epoch, uint64_t donor, int64_t now_ms) const {
  SyncVotes v;
  for (const auto &[id, r] : peers_) {
    if (!live(r, now_ms) || (r.flags & (ProgressRecord::kAway | ProgressRecord::kCheckpointer))) continue;
    auto h = syncs_.find(id);
    if (h == syncs_.end() || h->second.empty()) continue;
    if (id == donor) continue;
    ++v.others;
    if (h->second.rbegin()->first >= epoch) ++v.others_reached;
    auto at = h->second.find(epoch);
    if (at != h->second.end()) ++v.votes[at->second];
  }
  for (const auto &[id, history] : syncs_) {
    if (id == donor) continue;
    auto r = peers_.find(id);
    if (r != peers_.end() && (r->second.flags & ProgressRecord::kCheckpointer)) continue;  // it trains nothing
    auto at = history.find(epoch);
    if (at != history.end()) ++v.vouchers[at->second];
  }
  return v;
}

int64_t Tracker::newest(uint64_t peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.time_ms;
}

bool Tracker::left_since(uint64_t peer, int64_t since_ms) const {
  auto it = peers_.find(peer);
  return it != peers_.end() && (it->second.flags & ProgressRecord::kLeft) && it->second.time_ms >= since_ms;
}

bool Tracker::live(const ProgressRecord &r, int64_t now_ms, int64_t horizon_ms) const {
  return !(r.flags & ProgressRecord::kLeft) && now_ms - r.time_ms <= (horizon_ms < 0 ? ttl_ms_ : horizon_ms);
}

namespace {

// Whether a live record's epoch counts towards the swarm's: a checkpointer
// does not train, and a loading peer's epoch is not yet its own.
bool sets_swarm_epoch(const ProgressRecord &r) {
  return !(r.flags & (ProgressRecord::kCheckpointer | ProgressRecord::kLoading));
}

}  // namespace

int64_t Tracker::global_epoch(uint64_t me, int64_t my_epoch, int64_t now_ms) const {
  int64_t g = my_epoch;
  for (const auto &[id, r] : peers_)
    if (id != me && live(r, now_ms) && sets_swarm_epoch(r)) g = std::max(g, r.epoch);
  return g;
}

SwarmView Tracker::view(uint64_t me, int64_t my_epoch, uint64_t my_samples, double my_rate, int64_t now_ms,
                        int64_t epoch_start_ms, const SampledProgress *sample) const {
  SwarmView v;
  v.global_epoch = my_epoch;
  for (const auto &[id, r] : peers_) {
    // A checkpointer is no part of the training swarm: a donor only (donors()).
    if (id == me || !live(r, now_ms) || (r.flags & ProgressRecord::kCheckpointer)) continue;
    v.others.push_back(r);
    if (sets_swarm_epoch(r)) v.global_epoch = std::max(v.global_epoch, r.epoch);
  }
  v.peers = 1 + v.others.size();
  if (my_epoch == v.global_epoch) {
    v.samples = my_samples;
    v.rate = my_rate;
  }
  auto sampled = [sample](uint64_t id) {
    return !sample || std::binary_search(sample->fresh.begin(), sample->fresh.end(), id);
  };
  double others_samples = 0, others_rate = 0, training_rate = 0;
  size_t counted = 0;  // others whose records are in the sum (trained or not): the sample's size
  v.all_rated = my_rate > 0;
  for (const auto &r : v.others) {
    if (!sampled(r.peer_id)) continue;
    ++counted;
    // A loading peer has nothing yet; a diverged one's samples count 0.
    if (r.flags & ProgressRecord::kAway) continue;
    training_rate += r.samples_per_second;
    if (!(r.samples_per_second > 0)) v.all_rated = false;
    if (r.epoch == v.global_epoch - 1 && my_epoch == v.global_epoch && epoch_start_ms > 0) {
      // One behind in our view is most often a record that has not caught
      // up with a round we finished together: count what that peer has
      // likely accumulated since, at its rate. Without this, peers whose
      // steps are faster than the records refresh each overshoot the target.
      double since = std::clamp(double(now_ms - epoch_start_ms) / 1000.0, 0.0, 1.0);
      others_samples += double(static_cast<uint64_t>(r.samples_per_second * since));
      others_rate += r.samples_per_second;
      continue;
    }
    if (r.epoch != v.global_epoch) continue;
    // Extrapolate at most one second: a record older than that belongs to a
    // peer that is averaging or stalled, not one still accumulating.
    double age = std::clamp(double(now_ms - r.time_ms) / 1000.0, 0.0, 1.0);
    others_samples += double(r.samples + static_cast<uint64_t>(r.samples_per_second * age));
    others_rate += r.samples_per_second;
  }
  double scale = 1;
  if (sample) {
    const double others = std::max(0.0, sample->peers - 1);
    scale = counted > 0 ? others / double(counted) : 0;
    v.peers = std::max<size_t>(1, size_t(std::llround(sample->peers)));
    v.sampled = true;
  }
  v.samples += static_cast<uint64_t>(others_samples * scale);
  v.rate += others_rate * scale;
  v.training_rate = my_rate + training_rate * scale;
  return v;
}

std::pair<size_t, int64_t> Tracker::held(uint64_t me, int64_t now_ms) const {
  size_t n = 0;
  int64_t youngest = -1;
  for (const auto &[id, r] : peers_) {
    if (id == me || (r.flags & ProgressRecord::kLeft)) continue;
    ++n;
    const int64_t age = std::max<int64_t>(0, now_ms - r.time_ms);
    youngest = youngest < 0 ? age : std::min(youngest, age);
  }
  return {n, youngest};
}

size_t Tracker::recent_peers(uint64_t me, int64_t now_ms, int64_t age_ms) const {
  size_t n = 0;
  for (const auto &[id, r] : peers_)
    if (id != me && live(r, now_ms, age_ms) && !(r.flags & ProgressRecord::kCheckpointer)) ++n;
  return n;
}

std::vector<ProgressRecord> Tracker::live_records(int64_t now_ms, int64_t horizon_ms) const {
  std::vector<ProgressRecord> out;
  for (const auto &[id, r] : peers_)
    if (live(r, now_ms, horizon_ms)) out.push_back(r);
  return out;
}

std::vector<Donor> Tracker::donors(uint64_t me, int64_t min_epoch, int64_t now_ms, int64_t period) const {
  std::vector<const ProgressRecord *> picks;
  for (const auto &[id, r] : peers_) {
    if (id == me || !live(r, now_ms) || (r.flags & ProgressRecord::kAway)) continue;
    if (r.epoch < min_epoch || r.state_port == 0 || r.state_host.empty()) continue;
    picks.push_back(&r);
  }
  // Spread joiners over donors: ties broken by a per-caller mix of the id.
  auto mix = [me](uint64_t id) { return (id ^ me) * 0x9E3779B97F4A7C15ull; };
  const int64_t p = std::max<int64_t>(1, period);
  auto served = [p](int64_t epoch) { return (epoch + p - 1) / p; };  // the state-averaging period it serves from
  // A peer that skipped the sync point asked for (it loaded a later one, or
  // followed the swarm past it) cannot send it: one whose record names a
  // sync point at min_epoch or later comes first.
  auto holds = [&](const ProgressRecord *r) { return p > 1 && r->sync_hash != 0 && r->sync_epoch >= min_epoch; };
  std::sort(picks.begin(), picks.end(), [&](const ProgressRecord *a, const ProgressRecord *b) {
    if (holds(a) != holds(b)) return holds(a);
    if (served(a->epoch) != served(b->epoch)) return served(a->epoch) > served(b->epoch);
    bool a_busy = a->flags & ProgressRecord::kServing, b_busy = b->flags & ProgressRecord::kServing;
    if (a_busy != b_busy) return !a_busy;
    return mix(a->peer_id) < mix(b->peer_id);
  });
  std::vector<Donor> out;
  for (const auto *r : picks) out.push_back(Donor{r->peer_id, r->state_host, r->state_port, r->epoch});
  return out;
}

RecordCount count_record(const ProgressRecord &r, int64_t now_ms, int64_t live_ms, int64_t ttl_ms) {
  if (r.flags & ProgressRecord::kLeft) return {};
  const int64_t age = now_ms - r.time_ms;
  return {age <= ttl_ms, age <= live_ms};
}

double sampled_swarm(double estimate, size_t live, uint64_t kept) {
  const double live_part = kept > 0 ? std::min(1.0, double(live) / double(kept)) : 1.0;
  return 1 + (estimate - 1) * live_part;
}

}  // namespace loom_collab
