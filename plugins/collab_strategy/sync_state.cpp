// SPDX-License-Identifier: Apache-2.0
// Sync points: what lets a joiner check the state a donor sent it. At a
// state-averaging epoch the members of a group end with the same parameters
// (one collective's result, bit for bit), so their digests agree; each
// publishes its digest in its progress record and serves joiners only the
// state of such an epoch. A joiner restores a donor's state, takes its
// digest, and keeps it only if the other peers' votes for that epoch say so
// (state_check.h's judge: the donor's own vote never counts): a donor that
// sends poisoned parameters is refused, and the next donor is tried.
//
// What this cannot stop: most voters lying together (Sybil peers in an open
// swarm; in a keyed swarm only key holders publish), and a swarm where no
// other healthy peer publishes hashes or the others split evenly: the state
// is then taken on trust, with a warning. The optimizer's statistics are
// covered only when they are averaged (average_optimizer_state); otherwise
// each peer's differ and a donor's are taken on trust.
#include <algorithm>
#include <map>
#include <thread>

#include "peer.h"

namespace loom_collab {

bool Peer::is_sync_epoch(int64_t epoch) const {
  if (epoch <= 0) return false;
  if (max_steps_ >= 0 && epoch == max_steps_) return true;
  // Under local updates every outer step leaves the members with the same
  // anchor: every epoch is a sync point (its hash costs one pass over it).
  if (opt_.local_updates) return opt_.average_state_every > 0;
  return opt_.average_state_every > 0 && epoch % opt_.average_state_every == 0;
}

uint64_t Peer::state_digest() {
  Digest d;
  if (opt_.local_updates) {
    // The swarm's state is the anchor (the local steps since are this
    // peer's own, and so are its buffers and inner optimizer statistics).
    d.update(outer_.anchor.data(), outer_.anchor.size() * sizeof(float));
    const uint64_t h = d.finish();
    return h == 0 ? 1 : h;
  }
  for (const auto &p : params_) d.update(p.data, p.numel * sizeof(float));
  std::vector<FloatView> buffers;
  append_buffer_views(&buffers);
  for (const auto &b : buffers) d.update(b.data, b.numel * sizeof(float));
  if (opt_.average_optimizer_state && state_.struct_size >= LOOM_TRAINING_STATE_V1_2_SIZE &&
      state_.optimizer_state != nullptr) {
    const DLTensor *tensors = nullptr;
    uint32_t count = 0;
    if (state_.optimizer_state(state_.user, &tensors, &count) == LOOM_OK) {
      for (uint32_t i = 0; i < count; ++i) {
        FloatView v;
        if (float_view(tensors[i], &v)) d.update(v.data, v.numel * sizeof(float));
      }
    }
  }
  const uint64_t h = d.finish();
  return h == 0 ? 1 : h;  // 0 means "none" on the wire
}

void Peer::set_sync(int64_t epoch, uint64_t hash) {
  std::lock_guard<std::mutex> lock(sync_mutex_);
  // The record keeps a few earlier sync points too: the swarm may pass
  // several between two of a joiner's reads of it.
  if (sync_hash_ != 0) earlier_syncs_.insert(earlier_syncs_.begin(), {sync_epoch_, sync_hash_});
  // Epochs decrease below the newest (a state loaded from an older sync point drops later ones).
  earlier_syncs_.erase(std::remove_if(earlier_syncs_.begin(), earlier_syncs_.end(),
                                      [&](const ProgressRecord::SyncPoint &s) { return s.epoch >= epoch; }),
                       earlier_syncs_.end());
  if (earlier_syncs_.size() > ProgressRecord::kMaxEarlierSyncs) earlier_syncs_.resize(ProgressRecord::kMaxEarlierSyncs);
  sync_epoch_ = epoch;
  sync_hash_ = hash;
}

void Peer::record_sync(int64_t epoch) {
  at_sync_ = true;
  if (unhealthy_) return;  // diverged parameters: no vote
  const uint64_t h = state_digest();
  set_sync(epoch, h);
  detail("epoch " + std::to_string(epoch) + ": parameters' hash " + hex64(h) + " published");
}

Verdict Peer::check_loaded(int64_t epoch, uint64_t donor, Clock::time_point deadline, uint64_t *digest,
                           std::string *why) {
  StateCheck c;
  c.epoch = epoch;
  c.donor = donor;
  c.digest = state_digest();
  *digest = c.digest;
  c.every = opt_.average_state_every;
  c.bounded = opt_.target_group_size > 0;
  // Each other healthy peer's record as the state arrived: a record made
  // later (its sender's clock, so no skew between machines) is fresh.
  std::map<uint64_t, int64_t> arrived;
  for (const auto &r : view().others)
    if (r.peer_id != donor && !(r.flags & ProgressRecord::kAway)) arrived[r.peer_id] = r.time_ms;
  for (;;) {
    c.others_top = -1;
    c.others_fresh = true;
    for (const auto &r : view().others) {
      if (r.peer_id == donor || (r.flags & ProgressRecord::kAway)) continue;
      c.others_top = std::max(c.others_top, r.epoch);
      auto at = arrived.find(r.peer_id);
      if (at != arrived.end() && r.time_ms <= at->second) c.others_fresh = false;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      c.votes = tracker_.sync_votes(epoch, donor, wall_ms());
    }
    // A peer asked to stop judges as if out of time (it does not wait for
    // records that may come).
    c.out_of_time = Clock::now() >= deadline || stopping();
    // Waiting: the others' records of this sync point may be on their way,
    // or the donor claims an epoch they have yet to reach (one comes within
    // average_state_every epochs) or that their older records lag behind,
    // up to the load's deadline.
    Judgement j = judge(c);
    if (j.verdict != Verdict::wait) {
      *why = std::move(j.why);
      return j.verdict;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace loom_collab
