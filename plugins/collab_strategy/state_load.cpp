// SPDX-License-Identifier: Apache-2.0
// Loading the swarm's state: from the donors the tracker knows, each
// download checked against the other peers' published hashes (sync_state.cpp)
// before it is kept; a joiner's at setup, a lagging or healing peer's, and
// the host's load_state (ABI 1.8).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>

#include "../common/huge_pages.h"
#include "peer.h"

namespace loom_collab {

loom_status Peer::load_newest(std::string *why) {
  if (!set_up_) {
    *why = "load_state before setup";
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  const SwarmView v = view();
  if (v.others.empty()) {
    *why = "no other peer is in the swarm to load the state from";
    return LOOM_ERR_UNAVAILABLE;
  }
  std::string reason;
  if (!load_state(std::max<int64_t>(epoch_.load(), v.global_epoch), &reason)) {
    *why = "no state was loaded (" + reason + ")";
    return LOOM_ERR_UNAVAILABLE;
  }
  return LOOM_OK;
}

bool Peer::copy_own_state(Bytes *out) {
  const uint8_t *data = nullptr;
  size_t len = 0;
  if (snapshot_state(&data, &len) != LOOM_OK) return false;
  loom_plugin_common::reserve_huge(*out, len);
  out->assign(data, data + len);
  return true;
}

bool Peer::load_state(int64_t min_epoch, std::string *why) {
  drop_delayed();  // its step would move a state that is about to be replaced
  carry_.clear();
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(int64_t(opt_.load_state_timeout * 1000));
  // A checkpointer keeps serving what it holds while it loads a newer state
  // (its state server sends the bytes it was given, not the live state).
  if (!opt_.checkpointer) flags_ |= ProgressRecord::kLoading;
  wake_background();
  std::optional<DownloadedState> got;
  std::string reasons;
  // A donor that failed is skipped for a while: a dead peer's record lives
  // until it expires, and asking it again at once only spins.
  std::map<uint64_t, Clock::time_point> resting;
  constexpr auto kRest = std::chrono::seconds(2);
  constexpr auto kAloneGiveUp = std::chrono::seconds(3);
  Clock::time_point alone_since{};
  // This peer's own state, kept before a donor's first replaces it, so that
  // a refused donor's state (poisoned, or not finite) never stays.
  Bytes own;
  bool replaced = false;
  const bool checked = opt_.average_state_every > 0;
  Verdict verdict = Verdict::keep;
  uint64_t digest = 0;
  // Where the time of the last attempt went, for the log: this peer's own
  // copy (beside the download), the restore and the check.
  int64_t own_ms = 0, restore_ms = 0, check_ms = 0;
  auto ms_since = [](Clock::time_point t) {
    return int64_t(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
  };
  // Asked to stop (SIGINT, SIGTERM): the load ends at once, as if out of
  // time, and this peer leaves with the state it has. It waited out the
  // load (up to load_state_timeout, a minute by default) behind a donor
  // that did not answer.
  bool left = false;
  while (!got && Clock::now() < deadline && !(left = stopping())) {
    std::vector<Donor> donors;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      donors = tracker_.donors(id_, min_epoch, wall_ms(), checked ? opt_.average_state_every : 1);
    }
    const auto now = Clock::now();
    donors.erase(std::remove_if(donors.begin(), donors.end(),
                                [&](const Donor &d) {
                                  auto it = resting.find(d.peer_id);
                                  return it != resting.end() && it->second > now;
                                }),
                 donors.end());
    if (donors.empty()) {
      // Alone for a while (the donors just left, their goodbyes arrived):
      // waiting out load_state_timeout cannot bring one back.
      if (view().peers > 1) alone_since = Clock::time_point{};
      else if (alone_since == Clock::time_point{}) alone_since = now;
      else if (now - alone_since >= kAloneGiveUp) {
        reasons = (reasons.empty() ? "" : reasons + "; then ") + std::string("no other peer is left in the swarm");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    alone_since = Clock::time_point{};
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::string reason;
    // The download runs beside this thread, which meanwhile keeps a copy of
    // this peer's own state to put back if the donor's is refused: a charlm
    // state takes about a second to serialise, as long as the transfer.
    std::atomic<bool> cancel{false};
    auto download = std::async(std::launch::async, [&] {
      return download_state(donors, run_, min_epoch, left_ms, std::chrono::seconds(10), logfn_, &reason, &cancel,
                            opt_.swarm_key, size_t(opt_.load_donors_at_once));
    });
    const auto own_from = Clock::now();
    if (!replaced && own.empty()) copy_own_state(&own);
    own_ms = ms_since(own_from);
    while (download.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
      if (stopping()) cancel = true;
    got = download.get();
    const auto downloaded = Clock::now();
    if (!got) {
      reasons = reason;
      for (const auto &d : donors) resting[d.peer_id] = Clock::now() + kRest;
      continue;
    }
    if (checked && !is_sync_epoch(got->epoch)) {
      reasons = "peer " + std::to_string(got->donor) + " sent a state of epoch " + std::to_string(got->epoch) +
                ", which is not a state-averaging epoch: peers publish no hash for it to check it against";
      log_limited(Level::warn, "unsynced donor", reasons + "; trying the next donor");
      resting[got->donor] = deadline;
      got.reset();
      continue;
    }
    if (!replaced && own.empty()) {
      reasons = "this peer could not keep a copy of its own state to put back if a donor's were refused";
      got.reset();
      break;
    }
    const bool restored = restore_state(got->bytes.data(), got->bytes.size()) == LOOM_OK;
    const auto restored_at = Clock::now();
    restore_ms = ms_since(downloaded);
    replaced = replaced || restored;
    std::string judged;
    verdict = restored && checked ? check_loaded(got->epoch, got->donor, deadline, &digest, &judged) : Verdict::keep;
    check_ms = ms_since(restored_at);
    if (!restored) {
      reasons = "the state from peer " + std::to_string(got->donor) + " does not fit this model";
      log(Level::warn, reasons + "; trying the next donor");
    } else if (verdict == Verdict::refuse) {
      reasons = judged;
      log(Level::warn, reasons + "; trying the next donor");
    } else if (!state_finite()) {
      // A donor that diverged (or a state damaged on its way) must not
      // spread: the next donor's state replaces it.
      reasons = "the state of epoch " + std::to_string(got->epoch) + " from peer " + std::to_string(got->donor) +
                " is not finite (nan or inf)";
      log(Level::warn, reasons + "; trying the next donor");
    } else {
      if (verdict == Verdict::trust) log_limited(Level::warn, "unchecked state", judged);
      else if (checked) detail(judged);
      break;
    }
    resting[got->donor] = deadline;  // not again in this load
    got.reset();
  }
  flags_ &= ~ProgressRecord::kLoading;
  if (!got && left) reasons = "this peer is leaving (asked to stop)" + (reasons.empty() ? "" : "; before it, " + reasons);
  if (!got) {
    *why = reasons.empty() ? "no donor at epoch " + std::to_string(min_epoch) + " or later was found within " +
                                 seconds_text(opt_.load_state_timeout) + " s"
                           : reasons;
    // A refused donor's state never stays: this peer's own comes back.
    if (replaced) {
      if (restore_state(own.data(), own.size()) == LOOM_OK) {
        detail("no donor's state was kept; this peer's own state is back");
      } else {
        mark_unhealthy("a refused donor's state could not be replaced by this peer's own");
      }
    }
    wake_background();
    return false;
  }
  unhealthy_ = false;
  mark_synced();
  const size_t loaded_bytes = got->bytes.size();
  if (checked && verdict == Verdict::keep) {
    // Checked against the swarm: this peer now holds (and serves) that sync
    // point. A state taken on trust is neither vouched for nor served.
    set_sync(got->epoch, digest);
    if (server_) server_->publish(got->epoch, std::move(got->bytes));
  }
  zero_grads();
  alone_until_target_ = false;
  epoch_ = got->epoch;
  epoch_start_ms_ = wall_ms();
  samples_ = 0;
  windows_ = 0;
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  log(Level::info, "loaded the state of epoch " + std::to_string(got->epoch) + " from peer " +
                       std::to_string(got->donor) + " (" + std::to_string(loaded_bytes) + " bytes in " +
                       std::to_string(seconds) + " s)" +
                       (!checked ? "; not checked against the swarm: with average_state_every = 0 peers publish "
                                   "no hash of their parameters"
                        : verdict == Verdict::keep ? "; its parameters match the hash most peers published for that epoch"
                                                   : "; taken on trust: nothing to check it against") +
                       "; of it, this peer's own copy " + std::to_string(own_ms) + " ms (beside the download), the restore " +
                       std::to_string(restore_ms) + " ms, the check " + std::to_string(check_ms) + " ms");
  wake_background();
  return true;
}

bool Peer::catch_up(int64_t swarm_epoch, bool must_load, std::string *why) {
  Doing doing(activity_, "loading the swarm's state");
  const SwarmView v = view();
  // How long an epoch takes: the swarm's target over its rate, the time
  // between its epochs as seen (a joiner has seen none), or the peers'
  // lives over their epochs, whichever is longest.
  const double epoch_s = std::max({v.training_rate > 0 ? double(opt_.target_batch_size) / v.training_rate : 0.0,
                                   swarm_epoch_ms_.load() / 1000.0, epoch_seconds_by_lifetimes(v.others)});
  // Under local updates every epoch is a sync point: the swarm's is loaded.
  ResyncPlan plan;
  plan.load_epoch = swarm_epoch;
  if (!opt_.local_updates)
    plan = plan_resync(must_load ? -1 : epoch_.load(), swarm_epoch, opt_.average_state_every, epoch_s,
                       opt_.load_state_timeout);
  // No sync point passed yet (the swarm is in its first period): only the
  // swarm's next one can be loaded and checked.
  if (must_load && plan.load_epoch <= 0) plan = ResyncPlan{swarm_epoch, -1};
  const std::string behind =
      "this peer is at epoch " + std::to_string(epoch_.load()) + ", the swarm at " + std::to_string(swarm_epoch);
  if (plan.follow_to < 0) {
    log(Level::info, behind + ": loading the swarm's state");
  } else {
    char eta[32];
    std::snprintf(eta, sizeof eta, "%.0f", epoch_s);
    log(Level::info, behind + " and its next state-averaging epoch further than half of load_state_timeout (" +
                         (epoch_s > 0 ? std::string(eta) + " s an epoch" : std::string("its rate unknown")) + "): " +
                         (plan.load_epoch >= 0
                              ? "loading the state of its last one, epoch " + std::to_string(plan.load_epoch) + ", then"
                              : std::string("this peer is past its last one;")) +
                         " following it to epoch " + std::to_string(plan.follow_to));
  }
  if (plan.load_epoch >= 0 && !load_state(plan.load_epoch, why)) return false;
  if (plan.follow_to > epoch_) {
    // As one epoch behind, and state averaging pulls its parameters in.
    // What it accumulated meanwhile goes: stepped alone at stale epochs,
    // it held up to a whole target, and a 64-peer round it then joined
    // counted 1.57 times the target.
    if (plan.load_epoch < 0) {
      zero_grads();
      samples_ = 0;
      windows_ = 0;
    }
    epoch_ = plan.follow_to;
    epoch_start_ms_ = wall_ms();
    alone_until_target_ = false;
    wake_background();
  }
  return true;
}

}  // namespace loom_collab
