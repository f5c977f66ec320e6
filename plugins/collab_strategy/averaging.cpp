// SPDX-License-Identifier: Apache-2.0
// A round's averaging: the members first exchange their weights (samples)
// and norms, so that every member decides alike who counts and whether the
// round reached target_batch_size; then the gradients (weighted by samples)
// or the parameters (weighted by health) move in one allreduce, and a last
// tiny one confirms every member finished with a finite result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "group_split.h"
#include "peer.h"
#include "scale_kernels.h"

namespace loom_collab {
std::string group_text(const GroupRecord &g) {
  return std::to_string(g.members.size()) + " peers (epoch " + std::to_string(g.epoch) + ", attempt " +
         std::to_string(g.attempt) + (g.of ? ", a bounded group of the " + std::to_string(g.of) + " that met" : "") + ")";
}

namespace {

// How a round combined the gradients, for its log line.
std::string combine_text(const Options &o, bool by_parts) {
  const std::string codec = o.compression != Codec::none ? std::string(" in ") + codec_name(o.compression) : "";
  const std::string parts = by_parts ? " by parts" : "";
  if (o.centered_clip) return "centered_clip" + codec + parts + " ";
  if (!parts.empty()) return "mean by parts ";
  return o.compression != Codec::none ? "sliced mean" + codec + " " : "allreduce ";
}

}  // namespace

bool Peer::exchange_weights(GroupComm &comm, double weight, double norm, Clock::time_point deadline,
                            MemberWeights *out, std::string *why, double factor) {
  Doing doing(activity_, "exchanging weights with its group (a member still trains its share, or has not come)");
  // One slot per member for each value, the others' zero: a sum is then an
  // allgather. A norm that is not finite travels as -1 (nan would spread).
  const size_t n = size_t(comm.size()), r = size_t(comm.rank());
  // The link rates ride along (balance_bandwidth's parts): every member
  // reads the same doubles, so all compute the same parts.
  // So do the training rates (top_up_shares).
  // And each member's count of the swarm's full training peers (swarm_capped_target).
  // And each member's epoch and attempt: on a kept communicator
  // (kept_comm.h) nothing else would tell two rounds apart.
  // And each member's clock at its entry and its own samples a second this
  // epoch: a top-up's time box (top_up_box_seconds) ends at one time for all.
  std::vector<double> x(9 * n, 0.0);
  x[5 * n + r] = double(comm.epoch());
  x[6 * n + r] = double(comm.attempt());
  x[r] = weight;
  x[n + r] = std::isfinite(norm) ? norm : -1.0;
  x[2 * n + r] = link_rate_.value();
  const double training = rate_.load();
  x[3 * n + r] = std::isfinite(training) && training > 0 ? training : 0.0;
  // Client-mode peers' samples reach a group as its members' relayed
  // weights: the swarm's count here is its full peers that train.
  // Counted over the DHT's expiry where the live view saw fewer (peers_seen:
  // on a loaded machine records age past the live horizon).
  const SwarmView v = view();
  double excluded = 0;
  for (const auto &o : v.others)
    if (o.flags & (ProgressRecord::kClient | ProgressRecord::kAway)) excluded += 1;
  const double swarm = double(peers_seen(v)) - excluded;
  x[4 * n + r] = std::max(0.0, swarm);
  x[7 * n + r] = double(wall_ms());
  // Over the time it trained, not the epoch's: an epoch's waits (a first
  // meeting that took a second, a state served to a joiner) made the
  // group's speed read a third of what its box then trained, and the round
  // came to 1.54 targets (8 peers under churn).
  const double trained = trained_.since(epoch_start_ms_.load());
  x[8 * n + r] = trained >= 0.05 && weight > 0 && std::isfinite(weight) ? weight / trained : 0.0;
  if (comm.allreduce(x.data(), x.size(), LOOM_DTYPE_F64, LOOM_REDUCE_SUM, deadline, why) != LOOM_OK) return false;
  for (size_t i = 0; i < n; ++i) {
    if (x[5 * n + i] != x[5 * n + r] || x[6 * n + i] != x[6 * n + r]) {
      *why = "the member at rank " + std::to_string(i) + " is at epoch " + std::to_string(int64_t(x[5 * n + i])) +
             " attempt " + std::to_string(int64_t(x[6 * n + i])) + ", this peer at epoch " +
             std::to_string(comm.epoch()) + " attempt " + std::to_string(comm.attempt()) + " (rounds crossed)";
      comm.close(true);  // never kept for another round
      return false;
    }
  }
  std::vector<double> norms(x.begin() + n, x.begin() + 2 * n);
  *out = member_weights(std::vector<double>(x.begin(), x.begin() + n), norms, factor);
  out->rate.assign(x.begin() + 2 * n, x.begin() + 3 * n);
  out->training.assign(x.begin() + 3 * n, x.begin() + 4 * n);
  out->swarm_peers = swarm_count(std::vector<double>(x.begin() + 4 * n, x.begin() + 5 * n));
  out->met_ms = *std::max_element(x.begin() + 7 * n, x.begin() + 8 * n);
  out->speed = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[8 * n + i]) && x[8 * n + i] > 0) out->speed += x[8 * n + i];
  for (size_t i : out->outliers) {
    if (i == r) {
      mark_unhealthy("this peer's norm " + number_text(norms[i]) + " is over " + number_text(factor) +
                     " times its group's median");
    } else {
      log_limited(Level::warn, "outlier", "a member of this peer's group (rank " + std::to_string(i) +
                                              ") brought values of norm " + number_text(norms[i]) + ", over " +
                                              number_text(factor) + " times the group's median: it counts 0");
    }
  }
  return true;
}

RoundEnd Peer::average_gradients(double weight, double norm) {
  const int64_t epoch = epoch_.load();
  const double windows = double(std::max<uint64_t>(1, windows_));
  // Each member contributes weight x (its mean gradient); the sum over the
  // group times 1 / (the summed weights) is the sample-weighted mean.
  // direct (the collective offers allreduce_scaled and the gradients are one
  // vector): one allreduce_scaled from buffer_ writes the mean straight into
  // the gradients; buffer_ is only read, so a retry starts from it again.
  // Otherwise the sum runs in place on buffer_ and is divided into the
  // gradients: one more pass over them. Every member of a swarm takes the
  // same path (it is part of the fingerprint).
  const bool direct = flat_grads_ != nullptr;
  buffer_.resize(numel_);
  bool filled = false;
  bool grads_written = false;  // a failed direct round may leave partial sums in the gradients
  const float contribution = float(weight / windows);
  // After a failed direct round: the gradients from the weighted copy,
  // times factor (buffer_ holds the accumulated gradients x contribution).
  auto restore_grads = [&](double factor) {
    if (weight > 0) scale_into(flat_grads_, buffer_.data(), numel_, float(factor));
    else std::memset(flat_grads_, 0, numel_ * sizeof(float));  // nothing of this peer's counts
    grads_written = false;
  };
  // buffer_ = the gradients x k.
  auto gather = [&](float k) {
    if (direct) {
      scale_into(buffer_.data(), flat_grads_, numel_, k);
    } else {
      size_t at = 0;
      for (const auto &g : grads_) {
        scale_into(buffer_.data() + at, g.data, g.numel, k);
        at += g.numel;
      }
    }
  };
  auto fill = [&] {
    if (filled) return;
    gather(contribution);
    filled = true;
  };
  const auto start = Clock::now();
  const auto timeout = std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
  auto deadline = start + timeout;
  std::string last_failure;
  round_met_.reset();

  // One round over an open group. waited: how long the training thread
  // waited for the group; setup: how long building its communicator took
  // (ahead: on the prematch thread, while this peer still trained). nullopt:
  // the round failed (logged); retry among the survivors.
  // A pending group's meeting again keeps the target agreed before (or a
  // lower one), the waits of its earlier meetings (the round's line reports
  // them all) and its last time box (what it brought sets the next): set
  // for that one call; another group starts afresh.
  TopUpCarry carried;
  auto reduce = [&](const GroupRecord &group, std::unique_ptr<GroupComm> comm, Clock::duration waited,
                    Clock::duration setup, bool ahead) -> std::optional<RoundEnd> {
    Doing doing(activity_, "in its group's round");
    const TopUpCarry in = std::exchange(carried, TopUpCarry{});
    uint64_t agreed_target = in.target;  // 0: none yet
    std::string why;
    auto failed = [&] {
      round_met_.reset();
      log_limited(Level::warn, "round failed",
                  "averaging with " + group_text(group) + " failed: " + why + "; retrying among the survivors");
      last_failure = why;
      return std::nullopt;
    };
    // Members that formed the group ahead of the target (and those that
    // matched it at the target) wait for the last of them here, so that the
    // allreduce's time is its own.
    MemberWeights members;
    uint64_t share = 0;
    std::vector<uint64_t> shares;
    // A bounded group (target_group_size) brings its share of the target;
    // the swarm's groups together bring all of it.
    const uint64_t part = round_target(group);
    uint64_t target = part;
    double group_rate = 0;  // the members' training rates (group_training_rate), for the cap and its log
    double speed = 0;       // the group's samples a second (top_up_group_speed)
    double box = 0;         // a short round's time box in seconds (top_up_box_seconds); 0: by shares
    // top_up = "grants": how this member asks its group's hub, and where its
    // first grant leaves it. A round takes grants once.
    double after_last_ms = 0;
    std::optional<TopUpGrants> grants;
    uint64_t grant_until = 0;
    bool granted = in.granted;
    // A member that drew no batch of a short round's deficit meets the
    // others again at once (another batch would overshoot).
    for (bool waits = true; waits;) {
      // Contributions relayed for client-mode peers count as this member's.
      const double relayed = weight > 0 ? take_relayed(epoch, norm) : 0.0;
      if (!exchange_weights(*comm, weight + relayed, norm, deadline, &members, &why)) return failed();
      // How long the exchange took once the last member had come (its own
      // cost, against the wait for the others): for the round's line.
      after_last_ms = double(wall_ms()) - members.met_ms;
      const uint64_t batch = std::max<uint64_t>(1, opt_.batch_size ? opt_.batch_size : state_.batch_size);
      // A member in its first window has no rate yet: taken at the median
      // of the others' (as top_up_shares does); none known, no cap.
      group_rate = group_training_rate(members.training);
      target = part == 0 ? 0
                         : swarm_capped_target(part, opt_.target_batch_size, double(members.training.size()),
                                               members.swarm_peers, group_rate, batch, members.total,
                                               opt_.averaging_timeout);
      if (agreed_target > 0) target = std::min(target, agreed_target);
      agreed_target = target;
      const bool short_round = members.total > 0 && members.total < double(target);
      shares = short_round ? top_up_shares(target, members.weight, batch, members.training) : std::vector<uint64_t>{};
      share = short_round ? shares[size_t(comm->rank())] : 0;
      speed = top_up_group_speed(members.weight, in.box_from, in.box_seconds, group_rate, members.speed);
      box = opt_.top_up == Options::TopUp::boxes && short_round
                ? top_up_box_seconds(double(target) - members.total, speed, in.box_seconds > 0)
                : 0.0;
      const bool counts = members.weight[size_t(comm->rank())] > 0;
      bool trains = share > 0;
      grants.reset();
      if (opt_.top_up == Options::TopUp::grants && short_round && counts && !granted) {
        // The first grant is asked here: a member that gets none meets the
        // others at once, as one that drew no share does.
        granted = true;
        grants = grant_asker(group, *comm, double(target) - members.total, batch,
                             training_rate_share(members.training, size_t(comm->rank())));
        if (grants) {
          grant_until = samples_.load();
          // One whose ask failed meets again as a pending member does, its
          // deadline stretched to the others' top-up (Pending::others_by).
          trains = ask_grant(*grants, &grant_until) || grants->failed;
          grants->asking = {};  // this one is in the meeting's wait
        }
      }
      waits = short_round && box == 0 && !trains && counts;
      if (waits)
        detail("epoch " + std::to_string(epoch) + ": " + group_text(group) + " brought " +
               std::to_string(uint64_t(members.total)) + " of " + std::to_string(target) +
               " samples; this peer adds none and waits for the others");
    }
    round_met_ = Clock::now();
    if (ahead) waited = *round_met_ - start;
    const Clock::duration this_meeting = waited;
    waited += in.waited + in.asking;
    const double mine = members.weight[size_t(comm->rank())];
    const double total = members.total;
    if (total <= 0) {
      log_limited(Level::warn, "round empty", "epoch " + std::to_string(epoch) + ": no member of " + group_text(group) +
                                                  " brought finite gradients; the round is discarded on every member");
      return RoundEnd::discarded;
    }
    if (total < double(target)) {
      // The estimate that sent us here counted more than the members had: an
      // epoch steps only on what is averaged. Each member accumulates its
      // share of the deficit and the group meets again.
      auto p = std::make_unique<Pending>();
      p->group = group;
      p->comm = std::move(comm);
      p->until_samples = samples_.load() + share;
      p->carry.target = target;
      // A member that counts 0 trains on (uncounted) for as long as the
      // others need; one that counts but drew no batch of the deficit waits
      // for them in the exchange: about one batch's time.
      const double seconds = std::max(0.0, double(wall_ms() - epoch_start_ms_.load()) / 1000.0) *
                             (double(target) - total) / total;
      p->until_time = mine > 0 ? Clock::now() : Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
      p->others_by = Clock::now() + std::chrono::milliseconds(int64_t(1000 * top_up_seconds(shares, members.training)));
      p->carry.waited = waited - in.asking;  // meetings alone
      p->carry.asking = in.asking;
      p->carry.first = in.target > 0 ? in.first : this_meeting;
      p->carry.granted = granted;
      std::string adds = std::to_string(share);
      if (grants) {
        p->until_samples = grant_until;
        adds = grants->failed ? std::string("nothing (its hub gave no grant)")
                              : std::to_string(grant_until - samples_.load()) + " (a first grant of its group's hub" +
                                    (grants->own ? std::string(", this peer") : " at " + grants->host + ":" +
                                                                                    std::to_string(grants->port)) +
                                    ")";
        p->grants = std::move(grants);
      }
      if (box > 0) {
        // Every member trains until one time, each at its own pace (one
        // that counts 0, uncounted). The box counts from when the last member came (members
        // leave a meeting apart on a loaded machine: up to 0.26 s at 8
        // peers on 2 cores, and the group trained on meanwhile, 1.5 times
        // the box's samples), on each member's clock: one that runs ahead
        // or behind of the others' trains for no box or at most a box.
        const int64_t box_ms = int64_t(1000 * box);
        const int64_t left_ms = std::clamp<int64_t>(int64_t(members.met_ms) + box_ms - wall_ms(), 0, box_ms);
        p->until_samples = samples_.load();
        p->until_time = Clock::now() + std::chrono::milliseconds(left_ms);
        p->others_by = Clock::now() + std::chrono::milliseconds(box_ms);
        p->carry.box_from = members.weight;
        p->carry.box_seconds = double(box_ms) / 1000.0;
        adds = "what it trains in " + std::to_string(left_ms) + " ms (a time box of " + std::to_string(box_ms) +
               " ms at the group's " + number_text(speed) + " samples a second)";
      }
      detail("epoch " + std::to_string(epoch) + ": " + group_text(group) + " brought " + std::to_string(uint64_t(total)) +
             " of " + std::to_string(target) + " samples; this peer adds " + adds +
             " before the group meets again (the cap's inputs: " + std::to_string(int64_t(members.swarm_peers)) +
             " full peers in the swarm by the members' median count, the group's rate " +
             number_text(group_rate) + " samples a second)");
      activity_.top_up_until = p->until_samples;
      pending_ = std::move(p);
      return RoundEnd::short_of_target;
    }
    const auto posted = Clock::now();
    // Slice by slice (sliced_round.cpp) under centered_clip or a codec:
    // each member sends its mean gradient, and the owner of a slice weighs
    // the copies by their samples, CenteredClip capping the weights
    // (robust.h), so the honest result is the mean's near neighbour and a
    // rogue's pull is bounded. The gradients are written only once it is
    // done, so a retry starts from them again.
    // balance_bandwidth: by parts sized by link rate (balanced_round.cpp)
    // where that pays or rates must be measured; the ring otherwise.
    // delay_averaging: the data moves on a helper thread; the last epoch's
    // round is not delayed (nothing would apply it).
    const bool delayed = opt_.delay_averaging && !is_last_epoch(epoch);
    const bool by_parts = opt_.balance_bandwidth && opt_.compression == Codec::none && !delayed &&
                          parts_pay(members.rate, epoch);
    const bool sliced = opt_.centered_clip || opt_.compression != Codec::none || by_parts;
    if (delayed) {
      if (sliced) gather(float(1.0 / windows));
      else if (mine > 0) fill();
      else std::fill(buffer_.begin(), buffer_.end(), 0.0f);
      return launch_delayed(group, std::move(comm), members, total, sliced, waited, ahead, deadline);
    }
    if (sliced) {
      gather(float(1.0 / windows));
      filled = false;
      if (relayed_weight_ > 0) {
        // This member's value: the weighted mean of its own and its clients'.
        const double all = weight + relayed_weight_;
        for (uint64_t i = 0; i < numel_; ++i)
          buffer_[i] = float((double(buffer_[i]) * weight + double(relayed_sum_[i])) / all);
      }
      if (by_parts ? !balanced_average(*comm, buffer_.data(), numel_, members, buffer_.data(), deadline, &why)
                   : !sliced_average(*comm, buffer_.data(), numel_, members.weight, buffer_.data(), opt_.compression,
                                     deadline, &why))
        return failed();
    } else {
      // A member that counts 0 (diverged, or an outlier) sends zeros.
      const float *send = buffer_.data();
      if (mine > 0) {
        fill();
        if (relayed_weight_ > 0 && direct) {
          // buffer_ stays this peer's own (a failed round restores from it).
          relay_send_.resize(numel_);
          for (uint64_t i = 0; i < numel_; ++i) relay_send_[i] = buffer_[i] + relayed_sum_[i];
          send = relay_send_.data();
        } else if (relayed_weight_ > 0) {
          for (uint64_t i = 0; i < numel_; ++i) buffer_[i] += relayed_sum_[i];
          filled = false;
        }
      } else if (direct) {
        zeros_.assign(numel_, 0.0f);
        send = zeros_.data();
      } else {
        std::fill(buffer_.begin(), buffer_.end(), 0.0f);
        filled = false;
      }
      if (direct) {
        grads_written = true;
        // Every member divides by the same summed weights (bit for bit: one
        // allreduce's result), as allreduce_scaled requires.
        if (comm->allreduce_scaled(send, flat_grads_, numel_, 1.0 / total, deadline, &why) != LOOM_OK) return failed();
      } else {
        filled = false;  // from here buffer_ holds (part of) a sum
        if (comm->allreduce_sum(buffer_.data(), numel_, deadline, &why) != LOOM_OK) return failed();
      }
    }
    // The result counts only once every member has finished the allreduce,
    // and only if it is finite everywhere. A member that failed it (its own
    // deadline came first) may rewrite its buffers at once, while a
    // neighbour on this host still reads them by cross-memory attach and
    // could finish with that data. Such a member never comes here, so this
    // step fails for the others too, and they start again from their
    // weighted copies.
    const float *result = direct && !sliced ? flat_grads_ : buffer_.data();
    double finished[2] = {1, std::isfinite(sum_of_squares(result, numel_)) ? 0.0 : 1.0};
    if (comm->allreduce(finished, 2, LOOM_DTYPE_F64, LOOM_REDUCE_SUM, deadline, &why) != LOOM_OK) return failed();
    if (finished[1] > 0) {
      log_limited(Level::warn, "round not finite",
                  "epoch " + std::to_string(epoch) + ": the averaged gradients of " + group_text(group) +
                      " are not finite; the round is discarded on every member (no step)");
      return RoundEnd::discarded;
    }
    if (sliced) {
      if (direct) {
        std::memcpy(flat_grads_, buffer_.data(), numel_ * sizeof(float));
      } else {
        size_t at = 0;
        for (auto &g : grads_) {
          std::memcpy(g.data, buffer_.data() + at, g.numel * sizeof(float));
          at += g.numel;
        }
      }
    } else if (!direct) {
      size_t at = 0;
      for (auto &g : grads_) {
        divide_into(g.data, buffer_.data() + at, g.numel, float(total));
        at += g.numel;
      }
    }
    round_averaged_ = Clock::now();
    relay_total_ = total;
    const auto reduced = round_averaged_ - posted;
    report_.pending_round() = {epoch, group.group_hash(), uint32_t(group.members.size()), uint64_t(total),
                     float(std::chrono::duration<double, std::milli>(waited).count()), 0.0f};
    detail("epoch " + std::to_string(epoch) + ": averaged gradients of " + std::to_string(uint64_t(total)) +
           " samples with " + group_text(group) + " (matchmaking " + milliseconds_text(waited) + " ms" +
           (ahead ? ", group and communicator prepared ahead" : "") +
           (comm->adopted() ? ", the last round's communicator" : "") + ", averaging " + milliseconds_text(setup + reduced) +
           " ms: communicator " + milliseconds_text(setup) + " ms, " + combine_text(opt_, by_parts) + milliseconds_text(reduced) +
           " ms" + (direct && !sliced ? ", scaled into the gradients" : "") +
           (target < part ? ", its target capped at " + std::to_string(target) + " by its part of the swarm"
                          : std::string()) +
           top_up_text(in, this_meeting, after_last_ms) +
           ")");
    comm_ = std::move(comm);
    last_local_reason_.clear();
    return RoundEnd::averaged;
  };

  uint32_t first_attempt = 0;
  if (pending_) {
    // The group whose round fell short meets again.
    std::unique_ptr<Pending> p = std::move(pending_);
    activity_.top_up_until = 0;
    carried = std::move(p->carry);
    if (p->grants) carried.add(*p->grants);
    first_attempt = p->group.attempt + 1;
    // A member that drew a small share waits for the one that drew the
    // longest: at 64 peers a top-up took longer than averaging_timeout, and
    // the members that were done timed out in the weight exchange.
    deadline = std::max(deadline, p->others_by + timeout);
    if (auto end = reduce(p->group, std::move(p->comm), Clock::now() - start, Clock::duration{}, true)) return *end;
  } else if (prematch_ && prematch_->epoch == epoch) {
    // The group was being formed while this peer accumulated: wait for it
    // (matchmaking is bounded) and average over it if it came together.
    if (prematch_->thread.joinable()) {
      Doing doing(activity_, "waiting for its group forming ahead");
      prematch_->thread.join();
    }
    std::unique_ptr<Prematch> p = std::move(prematch_);
    if (p->group) first_attempt = p->group->attempt;
    if (p->comm) {
      if (auto end = reduce(*p->group, std::move(p->comm), Clock::now() - start, p->connected - p->matched, true))
        return *end;
      ++first_attempt;
    } else if (p->group && p->group->members.size() > 1) {
      detail("epoch " + std::to_string(epoch) + ": the group prepared ahead did not come together (" + p->why +
             "); matchmaking again");
    }
  } else {
    drop_prematch();  // of an epoch this peer left
  }
  for (uint32_t attempt = first_attempt; Clock::now() < deadline; ++attempt) {
    if (stopping()) {
      last_failure = "this peer is leaving (asked to stop)";
      break;
    }
    if (view().global_epoch > epoch) {
      // They go on accumulating at the next epoch, as they were (to within
      // a rounding: restored as buffer_ / contribution).
      if (grads_written) restore_grads(windows / weight);
      detail("the swarm finished epoch " + std::to_string(epoch) + " without this peer");
      return RoundEnd::moved_on;
    }
    // Join the attempt the others are at: attempts whose group already
    // closed are over (a peer that comes late to attempt 0 would otherwise
    // wait alone while the others retry at attempt 1).
    attempt = first_open_attempt(epoch, attempt);
    std::optional<GroupRecord> group;
    {
      Doing doing(activity_, "matchmaking");
      group = matchmake(epoch, attempt, deadline);
    }
    if (!group) {
      last_failure = "no group formed";
      continue;
    }
    if (int64_t(group->members.size()) < opt_.min_group_size) {
      last_failure = group->members.size() == 1 ? "no other peer was ready" : "the group was smaller than min_group_size";
      // Peers still training at this epoch will be ready soon (the swarm's
      // count said so): wait for them rather than step alone, at this same
      // attempt. Moving on to the next left this peer's join behind at each
      // one: a peer that came first to every attempt (alone for its window
      // while the others' group exchange timed out) was counted a member
      // by the others' leader at each attempt it had left, and their groups
      // failed with "1 of 7 members never published" 9 times over 34 s
      // (8-peer churn bench, this peer alone at attempts 1 to 14).
      if (!view().accumulating_at(epoch).empty()) {
        if (group->members.size() == 1) --attempt;  // unsigned: the loop's ++ brings it back (0 too)
        continue;
      }
      break;
    }
    std::string why;
    const auto matched = Clock::now();
    // Building the communicator waits for every member's address: a member
    // that died after joining must cost a few seconds, not the whole round,
    // so that the survivors still have time to retry without it.
    const auto setup_deadline =
        std::min(deadline, matched + std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000) + 2000));
    Doing opening(activity_, "connecting its group");
    auto comm = group_comm(*group, setup_deadline, nullptr, &why);
    if (!comm) {
      log_limited(Level::warn, "round open", "averaging with " + group_text(*group) + " could not start: " + why + "; retrying");
      last_failure = why;
      continue;
    }
    if (auto end = reduce(*group, std::move(comm), matched - start, Clock::now() - matched, false)) return *end;
  }
  if (last_failure.empty()) last_failure = "averaging_timeout passed";
  // Said once per streak at info: a peer alone for hours must not flood the log.
  const std::string line = "epoch " + std::to_string(epoch) + ": " + last_failure +
                           "; proceeding with local gradients (" + std::to_string(samples_.load()) + " samples)";
  if (last_failure != last_local_reason_) log(Level::info, line + " (said once until it changes)");
  else detail(line);
  last_local_reason_ = last_failure;
  if (grads_written) {
    // A direct round failed after writing into the gradients: the local
    // mean is buffer_ / weight.
    restore_grads(1.0 / weight);
    return RoundEnd::alone;
  }
  const float inv = float(1.0 / windows);
  for (auto &g : grads_)
    for (uint64_t i = 0; i < g.numel; ++i) g.data[i] *= inv;
  return RoundEnd::alone;
}

}  // namespace loom_collab
