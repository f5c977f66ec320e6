// SPDX-License-Identifier: Apache-2.0
// delay_averaging: a round overlapped with training (hivemind's delayed
// parameter updates). Matchmaking and the exchange of weights stay on the
// training thread (they decide whether the target is reached, and prematch
// already overlaps them); the allreduce, or the sliced mean, and the check
// that every member finished it run on a helper thread while the next
// epoch accumulates. The mean is applied at the first step boundary after
// the helper finished: the parameters step on gradients one epoch old.
#include <cmath>
#include <cstring>

#include "peer.h"
#include "scale_kernels.h"
#include "thread_name.h"

namespace loom_collab {

RoundEnd Peer::launch_delayed(const GroupRecord &group, std::unique_ptr<GroupComm> comm, const MemberWeights &members,
                              double total, bool sliced, Clock::duration waited, bool ahead,
                              Clock::time_point deadline) {
  auto d = std::make_unique<DelayedRound>();
  d->group = group;
  d->comm = std::move(comm);
  d->members = members;
  d->epoch = epoch_.load();
  d->total = total;
  d->sliced = sliced;
  d->waited = waited;
  d->ahead = ahead;
  d->posted = Clock::now();
  DelayedRound *raw = d.get();
  delayed_ = std::move(d);
  raw->thread = std::thread([this, raw, deadline] { run_delayed(raw, deadline); });
  return RoundEnd::launched;
}

void Peer::run_delayed(DelayedRound *d, Clock::time_point deadline) {
  name_this_thread("collab-delayed");
  try {
    bool ok = d->sliced ? sliced_average(*d->comm, buffer_.data(), numel_, d->members.weight, buffer_.data(),
                                         opt_.compression, deadline, &d->why)
                        : d->comm->allreduce_sum(buffer_.data(), numel_, deadline, &d->why) == LOOM_OK;
    if (ok) {
      // As a round on the training thread: it counts only once every member
      // finished, and only if it is finite everywhere.
      double finished[2] = {1, std::isfinite(sum_of_squares(buffer_.data(), numel_)) ? 0.0 : 1.0};
      ok = d->comm->allreduce(finished, 2, LOOM_DTYPE_F64, LOOM_REDUCE_SUM, deadline, &d->why) == LOOM_OK;
      d->finite = finished[1] == 0;
    }
    d->ok = ok;
  } catch (const std::exception &e) {
    d->why = e.what();
    d->ok = false;
  }
  d->finished = Clock::now();
  d->done = true;
}

void Peer::add_carry() {
  if (carry_.empty()) return;
  size_t at = 0;
  for (auto &g : grads_) {
    for (uint64_t i = 0; i < g.numel; ++i) g.data[i] += carry_[at + i];
    at += g.numel;
  }
  carry_.clear();
}

bool Peer::apply_delayed(loom_step_decision *decision) {
  if (!delayed_) return false;
  const auto asked = Clock::now();
  if (delayed_->thread.joinable()) delayed_->thread.join();
  std::unique_ptr<DelayedRound> d = std::move(delayed_);
  const auto waited_for = Clock::now() - asked;
  if (!d->ok || !d->finite) {
    // Every member finds the same (the last allreduce says so for all), so
    // the swarm skips this epoch's step alike; the epoch's samples are spent.
    log_limited(Level::warn, "delayed round",
                "epoch " + std::to_string(d->epoch) + ": the delayed round with " + group_text(d->group) +
                    (d->ok ? " averaged to values that are not finite" : " failed (" + d->why + ")") +
                    "; its step is skipped");
    return false;
  }
  // The next epoch's gradients so far wait aside; the round's mean takes
  // their place for this step.
  carry_.resize(numel_);
  size_t at = 0;
  for (auto &g : grads_) {
    std::memcpy(carry_.data() + at, g.data, g.numel * sizeof(float));
    if (d->sliced) std::memcpy(g.data, buffer_.data() + at, g.numel * sizeof(float));
    else divide_into(g.data, buffer_.data() + at, g.numel, float(d->total));
    at += g.numel;
  }
  comm_ = std::move(d->comm);  // state averaging at a sync point uses the group, as an undelayed round's does
  round_met_ = d->posted;
  round_averaged_ = Clock::now();
  relay_total_ = d->total;
  report_.pending_round() = {d->epoch, d->group.group_hash(), uint32_t(d->group.members.size()), uint64_t(d->total),
                   float(std::chrono::duration<double, std::milli>(d->waited).count()), 0.0f};
  detail("epoch " + std::to_string(d->epoch) + ": averaged gradients of " + std::to_string(uint64_t(d->total)) +
         " samples with " + group_text(d->group) + " (matchmaking " + milliseconds_text(d->waited) + " ms" +
         (d->ahead ? ", group and communicator prepared ahead" : "") + ", delayed: " +
         (d->sliced ? "sliced mean " : "allreduce ") + milliseconds_text(d->finished - d->posted) +
         " ms on a helper thread while the next epoch accumulated; training waited " +
         milliseconds_text(waited_for) + " ms for it; applied a step late)");
  applying_delayed_ = true;
  *decision = LOOM_STEP_APPLY;
  return true;
}

void Peer::drop_delayed() {
  if (!delayed_) return;
  if (delayed_->thread.joinable()) delayed_->thread.join();
  detail("epoch " + std::to_string(delayed_->epoch) + ": a delayed round's result is dropped (this peer loads "
         "the swarm's state, or leaves)");
  delayed_.reset();
}

}  // namespace loom_collab
