// SPDX-License-Identifier: Apache-2.0
// Local updates (DiLoCo, outer_step.h) on the training thread: every window
// steps the host's optimizer on the peer's own gradients; at the epoch's
// end the round averages the pseudo-gradient (anchor minus parameters)
// through the same machinery as gradients (matchmaking, weights, top-ups,
// codecs, CenteredClip), and the outer step moves the anchor.
#include <cmath>
#include <cstring>

#include "group_split.h"
#include "peer.h"

namespace loom_collab {

loom_status Peer::close_window(loom_step_decision *decision) {
  return opt_.local_updates ? local_round(decision) : finish_window(decision);
}

loom_status Peer::inner_step(loom_step_decision *decision) {
  // Never past max_steps, however this peer reached the last epoch (a
  // failed catch-up takes the swarm's epoch: a client once logged "step
  // 101/100" so).
  if (finished()) return LOOM_OK;
  *decision = LOOM_STEP_APPLY;
  return LOOM_OK;
}

uint64_t Peer::round_target(const GroupRecord &group) const {
  // An epoch of local_steps ends on each member's own count: the members
  // average what they have, and nobody tops anything up.
  if (opt_.local_updates && opt_.local_steps > 0) return 0;
  return part_target(opt_.target_batch_size, group);
}

void Peer::set_parameters_to_anchor() { copy_into_views(outer_.anchor.data(), params_); }

loom_status Peer::local_round(loom_step_decision *decision) {
  if (finished()) return LOOM_OK;
  const int64_t epoch = epoch_.load();
  // The window's own gradients wait aside; the pseudo-gradient takes their
  // place, as one window's worth (the round divides by windows_).
  stash_.resize(numel_);
  copy_from_views(grads_, stash_.data());
  double squares = 0;
  {
    size_t at = 0;
    for (size_t v = 0; v < grads_.size(); ++v) {
      float *g = grads_[v].data;
      const float *anchor = outer_.anchor.data() + at, *p = params_[v].data;
      for (uint64_t i = 0; i < grads_[v].numel; ++i) {
        g[i] = anchor[i] - p[i];
        squares += double(g[i]) * double(g[i]);
      }
      at += grads_[v].numel;
    }
  }
  auto put_back = [&] { copy_into_views(stash_.data(), grads_); };
  const bool finite = std::isfinite(squares);
  if (!finite)
    mark_unhealthy("epoch " + std::to_string(epoch) + ": this peer's parameters are not finite (nan or inf) after "
                   "its local steps");
  const double weight = unhealthy_ ? 0.0 : double(samples_.load());
  windows_ = 1;
  // A client's pseudo-gradient goes through its relay, as gradients do.
  const double norm = finite ? std::sqrt(squares) : -1.0;
  const bool missed_before = client_missed_;  // a client that then steps on locally missed nothing
  const RoundEnd end = opt_.client_mode ? relay_gradients(weight, norm) : average_gradients(weight, norm);
  // The members agree on the outer state before they step, and before a
  // relay answers its clients: where the group took the mean of differing
  // states, a client's own no longer matches, and it loads the state.
  bool differed = false;
  if (end == RoundEnd::averaged && comm_) {
    std::string why;
    const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
    if (!agree_on_outer_state(deadline, &why, &differed)) {
      differed = true;  // unknown: the clients load the state
      log_limited(Level::warn, "outer agreement",
                  "epoch " + std::to_string(epoch) + ": could not compare outer states with the group (" + why +
                      "); stepping from this peer's own");
    }
  }
  if (end != RoundEnd::short_of_target) answer_relayed(end, differed);
  if (end == RoundEnd::averaged && comm_ && comm_->is_open()) average_buffers(epoch);
  auto outer_step = [&](const char *with) {
    // The round left the mean pseudo-gradient in the gradients: step from
    // them view by view.
    double norm2 = 0;
    size_t at = 0;
    for (const auto &v : grads_) {
      norm2 += sum_of_squares(v.data, v.numel);
      nesterov_outer_step(outer_.anchor.data() + at, outer_.momentum.data() + at, v.data, v.numel,
                          float(opt_.outer_lr), float(opt_.outer_momentum), outer_.steps);
      at += v.numel;
    }
    ++outer_.steps;
    set_parameters_to_anchor();
    put_back();  // this window's own gradients make the next epoch's first local step
    outer_stepped_ = true;
    detail("epoch " + std::to_string(epoch) + ": outer step " + std::to_string(outer_.steps) + " with " + with +
           " pseudo-gradient of norm " + number_text(std::sqrt(norm2)) + " after " +
           std::to_string(inner_steps_ + 1) + " local steps");
    *decision = LOOM_STEP_APPLY;
    return LOOM_OK;
  };
  switch (end) {
    case RoundEnd::averaged:
      return outer_step("the group's mean");
    case RoundEnd::alone:
      if (finite && view().peers > 1 && opt_.local_steps == 0 &&
          double(samples_.load()) < double(opt_.target_batch_size)) {
        // Started early and nobody came: steps alone only on a whole target.
        alone_until_target_ = true;
        client_missed_ = missed_before;
        put_back();
        return inner_step(decision);
      }
      if (!finite) {
        zero_grads();
        samples_ = 0;
        heal();
        return LOOM_OK;
      }
      return outer_step("its own");
    case RoundEnd::short_of_target:
      put_back();  // local steps go on until this peer's share of the deficit is in
      return inner_step(decision);
    case RoundEnd::discarded:
      put_back();
      samples_ = 0;
      heal();
      if (unhealthy_) {
        zero_grads();
        return LOOM_OK;
      }
      return inner_step(decision);
    case RoundEnd::moved_on:
      put_back();
      // A client's relay said where the swarm is (a miss), or that its
      // outer state must be loaded (resync): one past this epoch at least.
      if (catch_up_local(opt_.client_mode ? std::max(view().global_epoch, client_jump_to_) : view().global_epoch))
        return LOOM_OK;
      return inner_step(decision);
    case RoundEnd::launched:
      break;  // never: delay_averaging is refused with local_updates
  }
  return LOOM_OK;
}

bool Peer::agree_on_outer_state(Clock::time_point deadline, std::string *why, bool *differed) {
  *differed = false;
  Digest d;
  d.update(outer_.anchor.data(), outer_.anchor.size() * sizeof(float));
  d.update(outer_.momentum.data(), outer_.momentum.size() * sizeof(float));
  d.update(&outer_.steps, sizeof outer_.steps);
  bool same = false;
  double steps = 0;  // the most outer steps any member took
  if (!same_digest(*comm_, d.finish(), double(outer_.steps), deadline, &same, &steps, why)) return false;
  if (same) return true;
  *differed = true;
  // Every member counts alike: none of the differing states is known right.
  // On copies: a failed allreduce leaves partial sums behind.
  const float inv = 1.0f / float(comm_->size());
  std::vector<float> anchor = outer_.anchor, momentum = outer_.momentum;
  for (auto *v : {&anchor, &momentum}) {
    if (comm_->allreduce_sum(v->data(), v->size(), deadline, why) != LOOM_OK) return false;
    for (float &f : *v) f *= inv;
  }
  outer_.anchor = std::move(anchor);
  outer_.momentum = std::move(momentum);
  outer_.steps = uint64_t(steps);
  // Under target_group_size each group's outer step moved its own anchor:
  // members from different groups meet with different states every epoch,
  // and this mean is what mixes them (as Moshpit's regrouping mixes
  // parameters). Otherwise a member stepped alone or went on from its own
  // parameters, which is worth a warning.
  if (opt_.target_group_size > 0)
    detail("epoch " + std::to_string(epoch_.load()) + ": the members of this round came from different groups' outer "
           "states; they took their mean before the outer step");
  else
    log_limited(Level::warn, "outer states differ",
                "epoch " + std::to_string(epoch_.load()) + ": the members of this round held different outer states "
                "(one stepped alone, or went on from its own parameters); they took their mean before the outer step");
  return true;
}

void Peer::average_buffers(int64_t epoch) {
  std::vector<FloatView> views;
  const size_t count = append_buffer_views(&views);
  const uint64_t n = views_numel(views);
  // Every member enters, with or without buffers: first they agree that
  // they all lend the same (a host may lend fewer, e.g. buffers it cannot
  // show as float32 CPU tensors), else nobody averages them.
  std::string why;
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
  double extent[2] = {double(n), -double(n)};
  if (comm_->allreduce(extent, 2, LOOM_DTYPE_F64, LOOM_REDUCE_MAX, deadline, &why) != LOOM_OK) {
    log_limited(Level::warn, "buffer averaging",
                "epoch " + std::to_string(epoch) + ": comparing the model's buffers failed (" + why +
                    "); keeping this peer's");
    return;
  }
  if (extent[0] != -extent[1]) {
    log_limited(Level::warn, "buffer sizes differ",
                "epoch " + std::to_string(epoch) + ": the members lend buffers of " +
                    std::to_string(uint64_t(-extent[1])) + " to " + std::to_string(uint64_t(extent[0])) +
                    " values (this peer " + std::to_string(n) + "); the buffers are not averaged");
    return;
  }
  if (n == 0) return;
  // On a copy, with a last slot that counts the members whose buffers are
  // finite: a failed allreduce leaves partial sums behind, and one
  // diverged member must not spoil the others' mean.
  std::vector<float> flat(n + 1);
  copy_from_views(views, flat.data());
  const bool finite = std::isfinite(sum_of_squares(flat.data(), n));
  if (!finite) std::fill(flat.begin(), flat.end() - 1, 0.0f);
  flat[n] = finite ? 1.0f : 0.0f;
  if (comm_->allreduce_sum(flat.data(), flat.size(), deadline, &why) != LOOM_OK) {
    log_limited(Level::warn, "buffer averaging",
                "epoch " + std::to_string(epoch) + ": averaging the model's buffers failed (" + why +
                    "); keeping this peer's");
    return;
  }
  if (!(flat[n] > 0)) {
    log_limited(Level::warn, "buffer averaging",
                "epoch " + std::to_string(epoch) + ": no member's buffers are finite; each keeps its own");
    return;
  }
  const float inv = 1.0f / flat[n];
  for (uint64_t i = 0; i < n; ++i) flat[i] *= inv;
  copy_into_views(flat.data(), views);
  detail("epoch " + std::to_string(epoch) + ": averaged the model's " + std::to_string(count) + " buffers with " +
         std::to_string(int(flat[n])) + " of " + std::to_string(comm_->size()) + " peers");
}

bool Peer::catch_up_local(int64_t global_epoch) {
  Doing doing(activity_, "loading the swarm's state (local updates)");
  std::string reason;
  log(Level::info, "this peer is at epoch " + std::to_string(epoch_.load()) + ", the swarm at " +
                       std::to_string(global_epoch) + ": loading the swarm's state (local updates)");
  if (load_state(global_epoch, &reason)) {
    inner_steps_ = 0;
    client_missed_ = false;  // a client's anchor is the swarm's again
    return true;
  }
  // Nothing to load: take the swarm's epoch from where this peer is. Its
  // anchor then differs from the others' until a later load (a client
  // tries again after its next outer step).
  if (opt_.client_mode) client_missed_ = true;
  log_limited(Level::warn, "local catch-up",
              "loading the swarm's state failed (" + reason + "); this peer goes on at epoch " +
                  std::to_string(global_epoch) + " from its own parameters");
  copy_from_views(params_, outer_.anchor.data());
  epoch_ = global_epoch;
  epoch_start_ms_ = wall_ms();
  samples_ = 0;
  inner_steps_ = 0;
  alone_until_target_ = false;
  wake_background();
  return false;
}

loom_status Peer::snapshot_state(const uint8_t **data, size_t *len) {
  const loom_status s = state_.snapshot(state_.user, data, len);
  if (s != LOOM_OK || !opt_.local_updates) return s;
  append_outer_state(*data, *len, outer_, &snapshot_with_outer_);
  *data = snapshot_with_outer_.data();
  *len = snapshot_with_outer_.size();
  return LOOM_OK;
}

loom_status Peer::restore_state(const uint8_t *data, size_t len) {
  if (!opt_.local_updates) return state_.restore(state_.user, data, len);
  OuterState outer;
  size_t host_len = 0;
  std::string why;
  if (!split_outer_state(data, len, numel_, &host_len, &outer, &why)) {
    log(Level::warn, why);
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  const loom_status s = state_.restore(state_.user, data, host_len);
  if (s != LOOM_OK) return s;
  // The joiner starts from the swarm's anchor: the donor's own local steps
  // since are the donor's contribution, not this peer's.
  outer_ = std::move(outer);
  set_parameters_to_anchor();
  return LOOM_OK;
}

}  // namespace loom_collab
