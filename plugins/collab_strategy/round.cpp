// SPDX-License-Identifier: Apache-2.0
// The training thread's side of a peer: counting samples towards the
// swarm's target, forming groups ahead (the prematch thread; matchmaking
// itself is in matchmaking.cpp), averaging gradients (weighted by samples)
// and parameters, and catching up when the swarm moved on.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <thread>

#include "group_split.h"
#include "peer.h"
#include "thread_name.h"

namespace loom_collab {
namespace {

// The share of target_batch_size the swarm's estimate must reach before a
// peer starts a round without a group formed ahead. Below the target on
// purpose: the estimate comes from records that lag (it runs behind on busy
// machines), and a round that starts short only tops up to the target,
// while one that starts late overshoots it by whatever the members
// accumulated meanwhile.
constexpr double kEnterFraction = 0.75;

}  // namespace

loom_status Peer::after_backward(uint64_t local_samples, loom_step_decision *decision, std::string *why) {
  *decision = LOOM_STEP_ACCUMULATE;
  if (misfit(why)) return LOOM_ERR_INVALID_ARGUMENT;
  if (opt_.checkpointer) return checkpointer_window();
  add_carry();  // the gradients a delayed round's step set aside come back first
  note_loss();
  if (stopping()) {
    // A delayed round that finished is applied (its group stepped on it).
    if (delayed_ && apply_delayed(decision)) return LOOM_OK;
    // Leaving: a group formed ahead, or one whose round fell short, waits
    // for this peer until averaging_timeout, so its round is finished;
    // nothing new starts, and the host tears down at its next step boundary.
    if (pending_ || (prematch_ && prematch_->epoch == epoch_ && prematch_->done && prematch_->comm)) {
      samples_ += opt_.batch_size ? opt_.batch_size : local_samples;
      ++windows_;
      return close_window(decision);
    }
    return LOOM_OK;
  }
  at_sync_ = false;  // a backward pass since: the state is no longer the sync point's
  serve_if_wanted();
  const uint64_t counted = opt_.batch_size ? opt_.batch_size : local_samples;
  samples_ += counted;
  ++windows_;
  const int64_t now = wall_ms();
  activity_.last_backward_ms = now;
  activity_.thread = std::this_thread::get_id();
  const auto tick = Clock::now();
  if (window_started_) {
    const double seconds = std::chrono::duration<double>(tick - window_start_).count();
    if (seconds > 0) {
      training_rate_.add(double(counted), seconds);  // training_rate.h says why not a mean of window rates
      rate_ = training_rate_.rate();
      trained_.add(seconds, epoch_start_ms_.load());
    }
  }
  window_start_ = tick;
  window_started_ = true;
  // A delayed round is applied at the first step boundary after it finished.
  if (delayed_ && delayed_->done && apply_delayed(decision)) return LOOM_OK;

  if (unhealthy_ && !pending_) {
    // A diverged peer stays out of rounds (the others do not wait for it:
    // its record says so) until it has reloaded the swarm's state; what it
    // computes meanwhile is dropped.
    heal();  // at most every few seconds; a loaded state restarts the window
    if (unhealthy_ && !stopping() && alone_for_good()) {
      *why = "this peer diverged (its loss or gradients were not finite, or far larger than its group's) and no "
             "other peer is left in the swarm to reload the state from";
      return LOOM_ERR_UNAVAILABLE;
    }
    if (unhealthy_) {
      drop_prematch();
      zero_grads();
      samples_ = 0;
      windows_ = 0;
    }
    wake_background();
    return LOOM_OK;
  }
  // Under local updates every window that does not end the epoch steps the
  // host's optimizer on this peer's own gradients.
  auto go_on = [&] { return opt_.local_updates ? inner_step(decision) : LOOM_OK; };
  if (pending_) {
    // The group of a round that fell short waits for this peer's share.
    // Under grants, a member whose grant is trained asks for the next.
    if (samples_ >= pending_->until_samples && tick >= pending_->until_time) {
      auto &g = pending_->grants;
      if (!g || !ask_grant(*g, &pending_->until_samples)) return close_window(decision);
      activity_.top_up_until = pending_->until_samples;
    } else if (pending_->grants) {
      ask_ahead(*pending_->grants, pending_->until_samples);
    }
    wake_background();
    return go_on();
  }
  SwarmView v = view();
  // A group formed ahead for this epoch is completed even when the swarm
  // moved on meanwhile: its members wait for each other in the barrier.
  if (prematch_ && prematch_->epoch == epoch_ && v.global_epoch > epoch_) {
    if (prematch_->thread.joinable()) {
      Doing doing(activity_, "waiting for its group forming ahead");
      prematch_->thread.join();  // bounded by matchmaking
    }
    if (prematch_->comm) return close_window(decision);
    prematch_.reset();
  }
  // A client one epoch behind goes on to its round: its relay answers a
  // late contribution with that round's mean (even as it ends), so it
  // steps as the swarm did without loading anything.
  const int64_t tolerated = opt_.client_mode ? 1 : 0;
  if (opt_.local_updates && v.global_epoch > epoch_ + tolerated && now - last_resync_try_ms_ > 5000) {
    // An outer step went without this peer: its anchor is not the swarm's.
    last_resync_try_ms_ = now;
    drop_prematch();
    if (catch_up_local(v.global_epoch)) {
      window_started_ = false;
      return LOOM_OK;
    }
    v = view();
  }
  if (!opt_.local_updates && v.global_epoch > epoch_ + 1 && now - last_resync_try_ms_ > 5000) {
    // More than one epoch behind: our gradients are stale; take the state.
    last_resync_try_ms_ = now;
    std::string reason;
    if (!catch_up(v.global_epoch, false, &reason)) {
      log_limited(Level::warn, "resync", "resync failed (" + reason + ")" + (stopping() ? "" : "; training on"));
    } else {
      // Caught up: a swarm that ran on meanwhile may be caught up with
      // again a second later (5 s is for loads that failed). A joiner of a
      // swarm of 100 epochs a second otherwise trained alone, its gradients
      // stale, until the run ended.
      last_resync_try_ms_ = wall_ms() - 4000;
    }
    window_started_ = false;
    return LOOM_OK;
  }
  if (!opt_.local_updates && v.global_epoch == epoch_ + 1) {
    // One behind (we missed a round): our gradients still count towards the
    // next step, as in hivemind; state averaging pulls the parameters back.
    detail("the swarm moved to epoch " + std::to_string(v.global_epoch) + " without this peer; following it");
    if (opt_.client_mode) client_missed_ = true;  // one update behind: no state averaging pulls a client back
    epoch_ = v.global_epoch;
    epoch_start_ms_ = now;
    alone_until_target_ = false;
    wake_background();
    v = view();
  }
  // A group formed ahead meets as soon as it is connected: the members then
  // learn what they really hold together and top up the rest exactly
  // (average_gradients), rather than each running on until its own estimate,
  // built from records that lag, says the target is reached.
  if (prematch_ && prematch_->epoch == epoch_ && prematch_->done && prematch_->comm) return close_window(decision);
  if (opt_.local_updates && opt_.local_steps > 0) {
    // An epoch of local_steps: this window is the last one's, or another.
    if (inner_steps_ + 1 >= uint64_t(opt_.local_steps)) return close_window(decision);
    wake_background();
    return inner_step(decision);
  }
  // Nor does a peer run on past its own share of the target (by its part of
  // the swarm's rate, or an equal part before rates are known) while the
  // others catch up or the group forms: what members bring beyond the target
  // cannot be taken back, what they lack is topped up.
  if (v.peers > 1 && !alone_until_target_) {
    // Rates count once every training peer has one. No share exceeds an
    // equal part of the whole target, so that the shares never sum past it
    // and a round ends at most a batch per member over: this peer's rate is
    // live and the others' come from records, which lag while rates climb
    // in the first epochs, so every share swells at once. (With a cap of
    // two equal shares, 8 peers' early rounds reached 2,688 to 2,944 of a
    // 2,048 target in 6 of 31 runs, tests/swarm/samples_per_round_test.cpp;
    // with this one 10 of 10 runs held every round at 2,048.)
    const double my_rate = rate_.load();
    const bool rated = v.all_rated && v.training_rate > 0;
    // Below the share, like the estimate's threshold: a round short of the
    // target tops up exactly, one past it cannot give samples back.
    const double equal = kEnterFraction * double(opt_.target_batch_size) / double(v.peers);
    const double share =
        rated ? std::min(equal / kEnterFraction,
                         kEnterFraction * double(opt_.target_batch_size) * my_rate / v.training_rate)
              : equal;
    if (double(samples_.load()) >= share) return close_window(decision);
  }
  // Waiting alone for a whole target of its own, a peer tries a round again
  // once the peers at its epoch hold a target together, at most every few
  // matchmaking windows: at 64 peers under churn every live peer's round
  // had found nobody (dead leaders' joins), each waited for a whole target
  // of its own (1 M samples at an estimated 500 a second, some 2,000 s),
  // and the swarm stood at one epoch.
  const int64_t retry_ms = std::max<int64_t>(5000, int64_t(2000 * opt_.matchmaking_time));
  if (alone_until_target_ && v.peers > 1 && v.samples >= opt_.target_batch_size &&
      now - alone_since_ms_ >= retry_ms) {
    detail("epoch " + std::to_string(epoch_.load()) + ": the " + std::to_string(v.peers) +
           " peers seen hold the target together; trying a round again instead of waiting for a whole target alone");
    alone_until_target_ = false;
    return close_window(decision);
  }
  const double enter_at = (alone_until_target_ ? 1.0 : kEnterFraction) * double(opt_.target_batch_size);
  if (double(alone_until_target_ ? samples_.load() : v.samples) < enter_at) {
    maybe_prematch(v);
    wake_background();
    return go_on();
  }
  return close_window(decision);
}

bool Peer::stopping() const {
  return LOOM_HOST_HAS(host_, stop_requested) && host_->stop_requested(host_->host_ctx) != 0;
}

loom_status Peer::finish_window(loom_step_decision *decision) {
  // No round past max_steps, however this peer reached the last epoch
  // (following the swarm, moving on, loading its state).
  if (finished()) return LOOM_OK;
  // A delayed round still moving is waited for and applied first; this
  // epoch's round starts at the next window. Its group forms meanwhile (on
  // the prematch thread): waiting here, this peer would otherwise join the
  // others' matchmaking late, find their group closed and step alone (on
  // 100 Mbit/s links, where a round outlasts an epoch's compute, 14 of 200
  // peer-epochs went so before this).
  if (delayed_) {
    if (!delayed_->done && !pending_) maybe_prematch(view());
    if (apply_delayed(decision)) return LOOM_OK;
  }
  const int64_t epoch = epoch_.load();
  const double windows = double(std::max<uint64_t>(1, windows_));
  double squares = 0;
  for (const auto &g : grads_) squares += sum_of_squares(g.data, g.numel);
  const bool finite = std::isfinite(squares);
  if (!finite)
    mark_unhealthy("epoch " + std::to_string(epoch) + ": this peer's loss or gradients are not finite (nan or inf)");
  // A peer that has not healed since it diverged brings nothing: its
  // gradients were taken at parameters that are not the swarm's.
  const double weight = unhealthy_ ? 0.0 : double(samples_.load());
  const double norm = finite ? std::sqrt(squares) / windows : -1.0;
  const RoundEnd end = opt_.client_mode ? relay_gradients(weight, norm) : average_gradients(weight, norm);
  // Contributions relayed through this peer get the round's mean or a miss,
  // unless its group meets again (they stay counted).
  if (end != RoundEnd::short_of_target && end != RoundEnd::launched) answer_relayed(end);
  auto restart_window = [&] {
    zero_grads();
    samples_ = 0;
    windows_ = 0;
    window_started_ = false;
    wake_background();
  };
  switch (end) {
    case RoundEnd::averaged:
      *decision = LOOM_STEP_APPLY;
      return LOOM_OK;
    case RoundEnd::short_of_target:
      return LOOM_OK;  // accumulate this peer's share of the deficit; the group meets again
    case RoundEnd::launched:
      // The round's data moves on its helper thread (buffer_ holds this
      // peer's part): the next epoch accumulates from zero meanwhile.
      zero_grads();
      samples_ = 0;
      windows_ = 0;
      epoch_ = epoch + 1;
      epoch_start_ms_ = wall_ms();
      alone_until_target_ = false;
      wake_background();
      return LOOM_OK;
    case RoundEnd::discarded:
      // Every member of the group discards alike and accumulates this epoch afresh.
      restart_window();
      heal();
      return LOOM_OK;
    case RoundEnd::moved_on:
      // One epoch on, these gradients still count; further, the next
      // after_backward loads the swarm's state (never a bare jump). A
      // diverged peer's gradients never count: it heals first.
      // (A client's relay said its round is over: the swarm is one on.)
      epoch_ = opt_.client_mode ? std::max(epoch_.load() + 1, client_jump_to_)
                                : std::min(view().global_epoch, epoch_.load() + 1);
      alone_until_target_ = false;
      if (unhealthy_) {
        restart_window();
        heal();
      }
      wake_background();
      return LOOM_OK;
    case RoundEnd::alone:
      if (finite && double(samples_.load()) < double(opt_.target_batch_size) && view().peers > 1) {
        // Started early and nobody came: a peer steps alone only on a whole
        // target of its own samples (the gradients are now its mean; scaled
        // back to the sum it accumulates on).
        const float back = float(std::max<uint64_t>(1, windows_));
        for (auto &g : grads_)
          for (uint64_t i = 0; i < g.numel; ++i) g.data[i] *= back;
        alone_until_target_ = true;
        alone_since_ms_ = wall_ms();
        return LOOM_OK;
      }
      if (!finite && !alone_for_good()) {
        // Others exist to heal from, or may still (a view can empty while
        // they run, alone_for_good): drop this window rather than step on
        // it. Judged by the view, a peer whose only partner had just died
        // handed its nan gradients to the trainer, which stopped the run
        // 6 s after the kill (DivergedAlone test).
        restart_window();
        heal();
        return LOOM_OK;
      }
      // Alone in the swarm for good: the trainer's on_nonfinite judges these
      // gradients.
      *decision = LOOM_STEP_APPLY;
      return LOOM_OK;
  }
  return LOOM_OK;
}

loom_status Peer::after_optimizer_step(std::string *why) {
  (void)why;
  if (opt_.local_updates && !outer_stepped_) {
    // A local step: the epoch goes on, its samples still count.
    windows_ = 0;
    ++inner_steps_;
    serve_if_wanted();
    return LOOM_OK;
  }
  outer_stepped_ = false;
  inner_steps_ = 0;
  const auto stepped = Clock::now();
  // A delayed round's step: the epoch moved on when the round was launched,
  // and the samples and windows counted since belong to the next one.
  const bool delayed = applying_delayed_;
  applying_delayed_ = false;
  const int64_t done = delayed ? epoch_.load() : epoch_.load() + 1;
  epoch_ = done;
  if (!delayed) {
    alone_until_target_ = false;
    samples_ = 0;
    windows_ = 0;
  }
  const bool last = max_steps_ >= 0 && done >= max_steps_;
  const bool sync = last || is_sync_epoch(done);  // a state-averaging epoch
  // Under local updates the outer step made the members agree: no
  // parameters to average; the last epoch ends on the anchor itself, not a
  // local step past it, so that every peer ends with the same parameters.
  const bool parameters = comm_ && sync && !opt_.local_updates;
  if (opt_.local_updates && last) set_parameters_to_anchor();
  if (parameters) average_parameters(last ? "the last epoch" : "state averaging");
  else relay_served_.clear();
  // Kept for the next round (kept_comm.h), unless a delayed round's may
  // still be in flight when the next one forms.
  if (opt_.delay_averaging) comm_.reset();
  else kept_.keep(std::move(comm_));
  // A client averages its parameters through its relay; when that fails
  // after a round it missed, it takes the swarm's state instead. Under
  // local updates no parameters are averaged (the outer step made the
  // members agree), and a client whose outer step was its own (its relay
  // failed or refused it) loads the state at once: its anchor left the
  // swarm's, and nothing else pulls it back.
  if (opt_.client_mode && sync && !opt_.local_updates && relay_parameters(done)) client_missed_ = false;
  if (opt_.client_mode && (sync || opt_.local_updates) && client_missed_ && !last && view().peers > 1) {
    std::string reason;
    detail(std::string(opt_.local_updates ? "client mode: this peer's outer step was its own (its relay's round went "
                                            "without it), so its anchor left the swarm's"
                                          : "client mode: a round since the last sync point went without this peer") +
           "; loading the swarm's state of epoch " + std::to_string(done));
    if (load_state(done, &reason))
      client_missed_ = false;
    else
      log_limited(Level::warn, "client resync",
                  "client mode: loading the swarm's state failed (" + reason + "); training on, to try again " +
                      (opt_.local_updates ? "after the next outer step" : "at the next sync point"));
  }
  if (opt_.average_state_every > 0 && sync) record_sync(done);
  // The optimizer's first step made its statistics: the snapshot has its
  // full size now (a joiner's had it at setup).
  if (!warmed_after_step_) {
    warmed_after_step_ = true;
    warm_serving();
  }
  if (round_met_) {
    // The part of the round no member spends waiting for a slower one (they
    // all met before it): what a front end's speed changes, and what the
    // benchmarks compare.
    const auto end = Clock::now();
    report_.pending_round().round_ms = float(std::chrono::duration<double, std::milli>(end - *round_met_).count());
    report_.round_done();
    detail("epoch " + std::to_string(done - 1) + ": round " + milliseconds_text(end - *round_met_) +
           " ms from the group's meeting to the next window: gradients " +
           milliseconds_text(round_averaged_ - *round_met_) + " ms, the host's optimizer step " +
           milliseconds_text(stepped - round_averaged_) + " ms, parameters " + milliseconds_text(end - stepped) + " ms" +
           (parameters ? " (averaged: " + std::string(last ? "the last epoch" : "state averaging") + ")" : ""));
    round_met_.reset();
  }
  // Before the background thread is woken to publish the new epoch, so that
  // a joiner reading it finds the snapshot ready; never a diverged state.
  if (!unhealthy_) serve_at_epoch_start(wall_ms() - epoch_start_ms_.load());
  wake_background();
  heal();
  serve_if_wanted();
  window_start_ = Clock::now();  // the next window's rate counts from here, not through the round
  window_started_ = true;
  if (!delayed) epoch_start_ms_ = wall_ms();
  return LOOM_OK;
}

void Peer::maybe_prematch(const SwarmView &v) {
  const int64_t epoch = epoch_.load();
  if (prematch_ && prematch_->epoch == epoch) return;
  if (finished()) return;  // no round past max_steps, so no group for one
  if (opt_.client_mode || pending_ || opt_.matchmaking_time <= 0 || v.rate <= 0 || v.peers < 2) return;
  const double eta = (kEnterFraction * double(opt_.target_batch_size) - double(v.samples)) / v.rate;
  if (eta > opt_.matchmaking_time) return;
  drop_prematch();
  auto p = std::make_unique<Prematch>();
  p->epoch = epoch;
  p->started = Clock::now();
  Prematch *raw = p.get();
  prematch_ = std::move(p);
  raw->thread = std::thread([this, raw] { run_prematch(raw); });
}

void Peer::run_prematch(Prematch *p) {
  name_this_thread("collab-match");
  // Bounded like a round: matchmaking_time for the group, then its setup.
  const auto deadline = p->started + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
  try {
    const uint32_t attempt = first_open_attempt(p->epoch, 0);
    p->group = matchmake(p->epoch, attempt, deadline, &p->cancel);
    p->matched = Clock::now();
    if (!p->group) {
      p->why = "no group formed";
    } else if (p->group->members.size() < 2 || int64_t(p->group->members.size()) < opt_.min_group_size) {
      p->why = "the group was too small";
    } else {
      const auto setup_deadline =
          std::min(deadline, p->matched + std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000) + 2000));
      p->comm = group_comm(*p->group, setup_deadline, &p->cancel, &p->why);
    }
  } catch (const std::exception &e) {
    p->why = std::string("matchmaking failed: ") + e.what();
  }
  p->connected = Clock::now();
  p->done = true;
}

std::unique_ptr<GroupComm> Peer::group_comm(const GroupRecord &group, Clock::time_point deadline,
                                            const std::atomic<bool> *cancel, std::string *why) {
  if (group.reuse != 0) return kept_.take(group, id_, why);
  auto comm = std::make_unique<GroupComm>(collective_, collective_instance_, dht_.get(), round_space_, run_, &identity_);
  comm->set_cancel(cancel);
  // A member that leaves (its goodbye read) ends a wait on it; goodbyes from
  // before the group's communicator count too within kClockSlackMs, which
  // covers hosts whose clocks differ a little.
  comm->set_left([this](uint64_t member, int64_t since_ms) {
    constexpr int64_t kClockSlackMs = 2000;
    std::lock_guard<std::mutex> lock(mutex_);
    return tracker_.left_since(member, since_ms - kClockSlackMs);
  });
  // The group's hub (oob_hub.h): this peer's own, or its leader's server.
  if (group.hub_port != 0 && group.leader == id_ && hub_) {
    comm->set_hub([hub = hub_, cancel](const Bytes &part, std::chrono::milliseconds hold, std::chrono::milliseconds,
                                       std::string *) {
      return std::optional<std::vector<Bytes>>(hub->exchange(part, hold, [cancel] { return cancel && cancel->load(); }));
    });
  } else if (group.hub_port != 0 && hub_) {
    // The part is the same at every ask of one exchange: sealed once.
    comm->set_hub([this, cancel, host = group.hub_host, port = group.hub_port, wrapped = Bytes()](
                      const Bytes &part, std::chrono::milliseconds hold, std::chrono::milliseconds wait,
                      std::string *failed) mutable {
      if (wrapped.empty()) wrapped = hub_->wrap(part);
      return fetch_oob(host, port, run_, wrapped, hold, wait, failed, opt_.swarm_key, cancel);
    });
  }
  if (server_ && hub_) comm->set_own_server(announce_host_, server_->port());
  if (comm->open(group, id_, deadline, why) != LOOM_OK) return nullptr;
  comm->set_cancel(nullptr);
  // The group's grants hub (grant_hub; for a split group's part, its first
  // member that serves) leads its books from here, before any member can
  // ask (the asks follow a meeting over this communicator). A whole group's
  // leader registered it already as it closed it (matchmaking), which
  // covers a kept communicator too.
  if (group.of != 0)
    if (const auto h = grant_hub(group, *comm); h && h->own) hub_->lead(group);
  return comm;
}

void Peer::drop_prematch() {
  if (!prematch_) return;
  prematch_->cancel = true;
  if (prematch_->thread.joinable()) prematch_->thread.join();
  prematch_.reset();  // closes a communicator the round never used
}


}  // namespace loom_collab
