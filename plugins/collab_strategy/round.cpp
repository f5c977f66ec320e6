// The training thread's side of a peer: counting samples towards the
// swarm's target, matchmaking, averaging gradients (weighted by samples)
// and parameters, and catching up when the swarm moved on.
#include <algorithm>
#include <set>
#include <thread>

#include "peer.h"

namespace loom_collab {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(10);

// out = in * k, and out = in / d: a round's passes over the gradients
// besides the allreduce (one with allreduce_scaled, two without). In fixed blocks, like plugins/common/average.h, because GCC's -O2
// vectoriser takes only loops of a known trip count; the pointers never
// overlap (the round's buffer and the host's gradients).
constexpr uint64_t kBlock = 16;
void scale_into(float *__restrict out, const float *__restrict in, uint64_t n, float k) {
  uint64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (uint64_t j = 0; j < kBlock; ++j) out[i + j] = in[i + j] * k;
  for (; i < n; ++i) out[i] = in[i] * k;
}
void divide_into(float *__restrict out, const float *__restrict in, uint64_t n, float d) {
  uint64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (uint64_t j = 0; j < kBlock; ++j) out[i + j] = in[i + j] / d;
  for (; i < n; ++i) out[i] = in[i] / d;
}

std::string group_text(const GroupRecord &g) {
  return std::to_string(g.members.size()) + " peers (epoch " + std::to_string(g.epoch) + ", attempt " +
         std::to_string(g.attempt) + ")";
}

}  // namespace

loom_status Peer::after_backward(uint64_t local_samples, loom_step_decision *decision, std::string *why) {
  (void)why;
  *decision = LOOM_STEP_ACCUMULATE;
  serve_if_wanted();
  const uint64_t counted = opt_.batch_size ? opt_.batch_size : local_samples;
  samples_ += counted;
  ++windows_;
  const int64_t now = wall_ms();
  const auto tick = Clock::now();
  if (window_started_) {
    const double seconds = std::chrono::duration<double>(tick - window_start_).count();
    if (seconds > 0) {
      const double instant = double(counted) / seconds;
      const double r = rate_.load();
      rate_ = r == 0 ? instant : 0.8 * r + 0.2 * instant;  // smoothed: one slow step must not stall the estimate
    }
  }
  window_start_ = tick;
  window_started_ = true;

  SwarmView v = view();
  // A group formed ahead for this epoch is completed even when the swarm
  // moved on meanwhile: its members wait for each other in the barrier.
  if (prematch_ && prematch_->epoch == epoch_ && v.global_epoch > epoch_) {
    if (prematch_->thread.joinable()) prematch_->thread.join();  // bounded by matchmaking
    if (prematch_->comm) return finish_window(decision);
    prematch_.reset();
  }
  if (v.global_epoch > epoch_ + 1 && now - last_resync_try_ms_ > 5000) {
    // More than one epoch behind: our gradients are stale; take the state.
    last_resync_try_ms_ = now;
    log(Level::info, "this peer is at epoch " + std::to_string(epoch_.load()) + ", the swarm at " +
                         std::to_string(v.global_epoch) + ": loading the swarm's state");
    std::string reason;
    if (!load_state(v.global_epoch, &reason)) log(Level::warn, "resync failed (" + reason + "); training on");
    window_started_ = false;
    return LOOM_OK;
  }
  if (v.global_epoch == epoch_ + 1) {
    // One behind (we missed a round): our gradients still count towards the
    // next step, as in hivemind; state averaging pulls the parameters back.
    detail("the swarm moved to epoch " + std::to_string(v.global_epoch) + " without this peer; following it");
    epoch_ = v.global_epoch;
    epoch_start_ms_ = now;
    wake_background();
    v = view();
  }
  if (v.samples < opt_.target_batch_size) {
    maybe_prematch(v);
    wake_background();
    return LOOM_OK;
  }
  return finish_window(decision);
}

loom_status Peer::finish_window(loom_step_decision *decision) {
  bool moved_on = false;
  average_gradients(&moved_on);
  if (moved_on) {
    // One epoch on, these gradients still count; further, the next
    // after_backward loads the swarm's state (never a bare jump).
    epoch_ = std::min(view().global_epoch, epoch_.load() + 1);
    wake_background();
    return LOOM_OK;  // keep accumulating: these gradients count at the new epoch
  }
  *decision = LOOM_STEP_APPLY;
  return LOOM_OK;
}

loom_status Peer::after_optimizer_step(std::string *why) {
  (void)why;
  const int64_t done = epoch_.load() + 1;
  epoch_ = done;
  samples_ = 0;
  windows_ = 0;
  const bool last = max_steps_ >= 0 && done >= max_steps_;
  if (comm_ && (last || (opt_.average_state_every > 0 && done % opt_.average_state_every == 0)))
    average_parameters(last ? "the last epoch" : "state averaging");
  comm_.reset();
  wake_background();
  serve_if_wanted();
  window_start_ = Clock::now();  // the next window's rate counts from here, not through the round
  window_started_ = true;
  epoch_start_ms_ = wall_ms();
  return LOOM_OK;
}

std::optional<GroupRecord> Peer::matchmake(int64_t epoch, uint32_t attempt, Clock::time_point round_deadline,
                                           const std::atomic<bool> *cancel) {
  const bool background = cancel != nullptr;
  auto cancelled = [cancel] { return cancel && cancel->load(); };
  const auto start = Clock::now();
  const auto window = std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000));
  const auto close_at = std::min(start + window, round_deadline);
  JoinRecord join{id_, epoch, attempt, wall_ms()};
  const std::string jkey = join_key(opt_.run_id, epoch, attempt), gkey = group_key(opt_.run_id, epoch, attempt);
  const Bytes join_bytes = encode(run_, join);
  bool joined = false;
  std::set<uint64_t> joiners{id_};

  // The group record with the smallest leader that lists this peer.
  auto find_group = [&](bool *excluded) -> std::optional<GroupRecord> {
    std::optional<GroupRecord> best;
    for (const auto &raw : dht_->get(gkey, std::chrono::milliseconds(200))) {
      std::string reason;
      auto g = decode_group(run_, raw.data(), raw.size(), &reason);
      if (!g || g->epoch != epoch || g->attempt != attempt) continue;
      if (!std::binary_search(g->members.begin(), g->members.end(), id_)) {
        if (excluded && g->leader < id_) *excluded = true;
        continue;
      }
      if (!best || g->leader < best->leader) best = g;
    }
    return best;
  };

  while (true) {
    if (cancelled()) return std::nullopt;
    // The parameters stand still while the training thread waits here: a
    // good moment to snapshot for a joiner (never from the prematch thread).
    if (!background) serve_if_wanted();
    if (!joined) joined = dht_->put(jkey, id_, join_bytes, std::chrono::seconds(60), std::chrono::milliseconds(300));
    for (const auto &raw : dht_->get(jkey, std::chrono::milliseconds(200))) {
      std::string reason;
      auto j = decode_join(run_, raw.data(), raw.size(), &reason);
      if (j && j->epoch == epoch && j->attempt == attempt) joiners.insert(j->peer_id);
    }
    // Close early once every peer training at this epoch, or one behind it
    // (it will follow within a step), has joined: records lag the peers by
    // up to a refresh, so a peer that just caught up still counts.
    const SwarmView now_view = view();
    std::vector<uint64_t> expected = now_view.training_at(epoch);
    for (uint64_t p : now_view.training_at(epoch - 1)) expected.push_back(p);
    bool all = std::all_of(expected.begin(), expected.end(), [&](uint64_t p) { return joiners.count(p) > 0; });
    if (all || Clock::now() >= close_at) break;
    if (*joiners.begin() != id_) {
      if (auto g = find_group(nullptr)) return g;  // our leader already closed
    }
    std::this_thread::sleep_for(kPoll);
  }
  const uint64_t leader = *joiners.begin();
  if (leader == id_) {
    GroupRecord g;
    g.leader = id_;
    g.epoch = epoch;
    g.attempt = attempt;
    g.members.assign(joiners.begin(), joiners.end());
    if (g.members.size() > 1)
      dht_->put(gkey, id_, encode(run_, g), std::chrono::seconds(60), std::chrono::milliseconds(500));
    return g;
  }
  // A follower waits for its leader's record, at most one more window.
  const auto wait_until = std::min(Clock::now() + window + std::chrono::seconds(1), round_deadline);
  while (Clock::now() < wait_until && !cancelled()) {
    bool excluded = false;
    if (auto g = find_group(&excluded)) return g;
    if (excluded) break;
    std::this_thread::sleep_for(kPoll);
  }
  detail("no group at epoch " + std::to_string(epoch) + " attempt " + std::to_string(attempt) + " included this peer");
  return std::nullopt;
}

uint32_t Peer::first_open_attempt(int64_t epoch, uint32_t from) {
  for (uint32_t attempt = from; attempt < from + 16; ++attempt) {
    bool closed = false;
    for (const auto &raw : dht_->get(group_key(opt_.run_id, epoch, attempt), std::chrono::milliseconds(100))) {
      std::string reason;
      auto g = decode_group(run_, raw.data(), raw.size(), &reason);
      if (g && g->epoch == epoch && g->attempt == attempt) closed = true;
    }
    if (!closed) return attempt;
  }
  return from + 16;
}

void Peer::maybe_prematch(const SwarmView &v) {
  const int64_t epoch = epoch_.load();
  if (prematch_ && prematch_->epoch == epoch) return;
  if (opt_.matchmaking_time <= 0 || v.rate <= 0 || v.peers < 2) return;
  const double eta = double(opt_.target_batch_size - v.samples) / v.rate;
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
      auto comm = std::make_unique<GroupComm>(collective_, collective_instance_, dht_.get(), opt_.run_id, run_);
      comm->set_cancel(&p->cancel);
      const auto setup_deadline =
          std::min(deadline, p->matched + std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000) + 2000));
      if (comm->open(*p->group, id_, setup_deadline, &p->why) == LOOM_OK) {
        comm->set_cancel(nullptr);
        p->comm = std::move(comm);
      }
    }
  } catch (const std::exception &e) {
    p->why = std::string("matchmaking failed: ") + e.what();
  }
  p->connected = Clock::now();
  p->done = true;
}

void Peer::drop_prematch() {
  if (!prematch_) return;
  prematch_->cancel = true;
  if (prematch_->thread.joinable()) prematch_->thread.join();
  prematch_.reset();  // closes a communicator the round never used
}

bool Peer::average_gradients(bool *moved_on) {
  *moved_on = false;
  const int64_t epoch = epoch_.load();
  const uint64_t weight = samples_.load();
  const double windows = double(std::max<uint64_t>(1, windows_));
  // Each peer contributes weight x (its mean gradient); the sum over the
  // group times 1 / (the summed weights) is the sample-weighted mean.
  // direct (the collective offers allreduce_scaled and the gradients are one
  // vector): the summed weights come first (one tiny allreduce), then one
  // allreduce_scaled from buffer_ writes the mean straight into the
  // gradients; buffer_ is only read, so a retry starts from it again.
  // Otherwise the sum runs in place on buffer_, whose last element carries
  // the weight, and is divided into the gradients: one more pass over them.
  // (A peer without samples has nothing to restore the gradients from.)
  const bool direct = flat_grads_ != nullptr && weight > 0;
  buffer_.resize(numel_ + (direct ? 0 : 1));
  bool filled = false;
  bool grads_written = false;  // a failed direct round may leave partial sums in the gradients
  const float contribution = float(double(weight) / windows);
  // After a failed direct round: the gradients from the weighted copy,
  // times factor (buffer_ holds the accumulated gradients x contribution).
  auto restore_grads = [&](double factor) {
    scale_into(flat_grads_, buffer_.data(), numel_, weight > 0 ? float(factor) : 0.0f);
    grads_written = false;
  };
  auto fill = [&] {
    if (direct) {
      scale_into(buffer_.data(), flat_grads_, numel_, contribution);
    } else {
      size_t at = 0;
      for (const auto &g : grads_) {
        scale_into(buffer_.data() + at, g.data, g.numel, contribution);
        at += g.numel;
      }
      buffer_[numel_] = float(weight);
    }
    filled = true;
  };
  const auto filling = Clock::now();
  fill();
  const auto start = Clock::now();
  const auto prepared = start - filling;
  const auto deadline = start + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
  std::string last_failure;
  auto ms = [](Clock::duration d) { return std::to_string(int64_t(std::chrono::duration<double, std::milli>(d).count())); };
  // One allreduce over an open group; true when the gradients now hold the
  // average. waited: how long the training thread waited for the group;
  // setup: how long building its communicator took (ahead: on the prematch
  // thread, while this peer still trained).
  auto reduce = [&](const GroupRecord &group, std::unique_ptr<GroupComm> comm, Clock::duration waited,
                    Clock::duration setup, bool ahead) {
    if (!filled) fill();
    std::string why;
    auto failed = [&] {
      log(Level::warn, "averaging with " + group_text(group) + " failed: " + why + "; retrying among the survivors");
      last_failure = why;
      return false;
    };
    // Members that formed the group ahead of the target (and those that
    // matched it at the target: the same group, the same communicator) wait
    // for the last of them here, so that the allreduce's time is its own:
    // in the summed weights' allreduce (direct) or a barrier. Every member
    // makes the same calls, whichever way it came.
    double total = double(weight);
    if ((direct ? comm->allreduce(&total, 1, LOOM_DTYPE_F64, LOOM_REDUCE_SUM, deadline, &why)
                : comm->barrier(deadline, &why)) != LOOM_OK)
      return failed();
    if (ahead) waited = Clock::now() - start;
    const auto posted = Clock::now();
    if (direct) {
      grads_written = true;
      // Every member divides by the same summed weights (bit for bit: one
      // allreduce's result), as allreduce_scaled requires.
      if (comm->allreduce_scaled(buffer_.data(), flat_grads_, numel_, total > 0 ? 1.0 / total : 1.0, deadline,
                                 &why) != LOOM_OK)
        return failed();
    } else {
      filled = false;  // from here buffer_ holds (part of) a sum
      if (comm->allreduce_sum(buffer_.data(), buffer_.size(), deadline, &why) != LOOM_OK) return failed();
    }
    // The result counts only once every member has finished the allreduce.
    // A member that failed it (its own deadline came first) may rewrite its
    // buffers at once, while a neighbour on this host still reads them by
    // cross-memory attach and could finish with that data. Such a member
    // never comes here, so this step fails for the others too, and they
    // start again from their weighted copies.
    double finished = 1;
    if (comm->allreduce(&finished, 1, LOOM_DTYPE_F64, LOOM_REDUCE_SUM, deadline, &why) != LOOM_OK) return failed();
    if (!direct) {
      total = buffer_[numel_];
      size_t at = 0;
      for (auto &g : grads_) {
        divide_into(g.data, buffer_.data() + at, g.numel, float(total));
        at += g.numel;
      }
    }
    const auto reduced = Clock::now() - posted;
    detail("epoch " + std::to_string(epoch) + ": averaged gradients of " + std::to_string(uint64_t(total)) +
           " samples with " + group_text(group) + " (matchmaking " + ms(waited) + " ms" +
           (ahead ? ", group and communicator prepared ahead" : "") + ", averaging " + ms(setup + reduced) +
           " ms: communicator " + ms(setup) + " ms, allreduce " + ms(reduced) + " ms; contribution " +
           ms(prepared) + " ms" + (direct ? ", scaled into the gradients" : "") + ")");
    comm_ = std::move(comm);
    last_local_reason_.clear();
    return true;
  };

  uint32_t first_attempt = 0;
  if (prematch_ && prematch_->epoch == epoch) {
    // The group was being formed while this peer accumulated: wait for it
    // (matchmaking is bounded) and average over it if it came together.
    if (prematch_->thread.joinable()) prematch_->thread.join();
    std::unique_ptr<Prematch> p = std::move(prematch_);
    if (p->group) first_attempt = p->group->attempt;
    if (p->comm) {
      if (reduce(*p->group, std::move(p->comm), Clock::now() - start, p->connected - p->matched, true)) return true;
      ++first_attempt;
    } else if (p->group && p->group->members.size() > 1) {
      detail("epoch " + std::to_string(epoch) + ": the group prepared ahead did not come together (" + p->why +
             "); matchmaking again");
    }
  } else {
    drop_prematch();  // of an epoch this peer left
  }
  for (uint32_t attempt = first_attempt; Clock::now() < deadline; ++attempt) {
    if (view().global_epoch > epoch) {
      *moved_on = true;
      // They go on accumulating at the next epoch, as they were (to within
      // a rounding: restored as buffer_ / contribution).
      if (grads_written) restore_grads(windows / double(weight));
      detail("the swarm finished epoch " + std::to_string(epoch) + " without this peer");
      return false;
    }
    // Join the attempt the others are at: attempts whose group already
    // closed are over (a peer that comes late to attempt 0 would otherwise
    // wait alone while the others retry at attempt 1).
    attempt = first_open_attempt(epoch, attempt);
    std::optional<GroupRecord> group = matchmake(epoch, attempt, deadline);
    if (!group) {
      last_failure = "no group formed";
      continue;
    }
    if (int64_t(group->members.size()) < opt_.min_group_size) {
      last_failure = group->members.size() == 1 ? "no other peer was ready" : "the group was smaller than min_group_size";
      // Peers still training at this epoch will be ready soon (the swarm's
      // count said so): wait for them rather than step alone.
      if (!view().accumulating_at(epoch).empty()) continue;
      break;
    }
    auto comm = std::make_unique<GroupComm>(collective_, collective_instance_, dht_.get(), opt_.run_id, run_);
    std::string why;
    const auto matched = Clock::now();
    // Building the communicator waits for every member's address: a member
    // that died after joining must cost a few seconds, not the whole round,
    // so that the survivors still have time to retry without it.
    const auto setup_deadline =
        std::min(deadline, matched + std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000) + 2000));
    if (comm->open(*group, id_, setup_deadline, &why) != LOOM_OK) {
      log(Level::warn, "averaging with " + group_text(*group) + " could not start: " + why + "; retrying");
      last_failure = why;
      continue;
    }
    if (reduce(*group, std::move(comm), matched - start, Clock::now() - matched, false)) return true;
  }
  if (last_failure.empty()) last_failure = "averaging_timeout passed";
  // Said once per streak at info: a peer alone for hours must not flood the log.
  const std::string line = "epoch " + std::to_string(epoch) + ": " + last_failure +
                           "; proceeding with local gradients (" + std::to_string(weight) + " samples)";
  if (last_failure != last_local_reason_) log(Level::info, line + " (said once until it changes)");
  else detail(line);
  last_local_reason_ = last_failure;
  if (grads_written) {
    // A direct round failed after writing into the gradients: the local
    // mean is buffer_ / weight.
    restore_grads(1.0 / double(weight));
    return false;
  }
  const float inv = float(1.0 / windows);
  for (auto &g : grads_)
    for (uint64_t i = 0; i < g.numel; ++i) g.data[i] *= inv;
  return false;
}

bool Peer::average_views(std::vector<FloatView> &views, Clock::time_point deadline, std::string *why) {
  uint64_t numel = 0;
  for (const auto &v : views) numel += v.numel;
  scratch_.resize(numel);
  size_t at = 0;
  for (const auto &v : views) {
    std::copy(v.data, v.data + v.numel, scratch_.begin() + at);
    at += v.numel;
  }
  if (comm_->allreduce_sum(scratch_.data(), numel, deadline, why) != LOOM_OK) return false;
  const float inv = 1.0f / float(comm_->size());
  at = 0;
  for (auto &v : views) {
    for (uint64_t i = 0; i < v.numel; ++i) v.data[i] = scratch_[at + i] * inv;
    at += v.numel;
  }
  return true;
}

void Peer::average_parameters(const char *reason) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
  std::string why;
  // The model's buffers (BatchNorm statistics, ABI 1.4) go with the
  // parameters in the same allreduce.
  std::vector<FloatView> views = params_;
  const size_t buffers = append_buffer_views(&views);
  if (!average_views(views, deadline, &why)) {
    log(Level::warn, std::string(reason) + ": parameter averaging failed (" + why + "); keeping this peer's");
    return;
  }
  detail(std::string(reason) + ": averaged the parameters" + (buffers ? " and " + std::to_string(buffers) + " buffers" : "") +
         " with " + std::to_string(comm_->size()) + " peers");
  if (opt_.average_optimizer_state) average_optimizer_state(reason, deadline);
}

size_t Peer::append_buffer_views(std::vector<FloatView> *views) {
  if (state_.struct_size < LOOM_TRAINING_STATE_V1_4_SIZE || state_.buffers == nullptr) return 0;
  const DLTensor *tensors = nullptr;
  uint32_t count = 0;
  if (state_.buffers(state_.user, &tensors, &count) != LOOM_OK) {
    log(Level::warn, "the host could not lend the model's buffers; they are not averaged");
    return 0;
  }
  size_t added = 0;
  for (uint32_t i = 0; i < count; ++i) {
    FloatView v;
    if (!float_view(tensors[i], &v)) {
      log(Level::warn, "buffer " + std::to_string(i) + " is not a compact float32 CPU tensor; it is not averaged");
      continue;
    }
    views->push_back(v);
    ++added;
  }
  return added;
}

void Peer::average_optimizer_state(const char *reason, Clock::time_point deadline) {
  if (state_.struct_size < LOOM_TRAINING_STATE_V1_2_SIZE || state_.optimizer_state == nullptr) return;  // said at setup
  const DLTensor *tensors = nullptr;
  uint32_t count = 0;
  if (state_.optimizer_state(state_.user, &tensors, &count) != LOOM_OK) {
    log(Level::warn, std::string(reason) + ": the host could not lend the optimizer's statistics; not averaged");
    return;
  }
  std::vector<FloatView> views(count);
  uint64_t numel = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (!float_view(tensors[i], &views[i])) {
      log(Level::warn, std::string(reason) + ": optimizer statistic " + std::to_string(i) +
                           " is not a compact float32 CPU tensor; the optimizer's statistics are not averaged");
      return;
    }
    numel += views[i].numel;
  }
  // The members must agree on the layout before summing: a peer whose
  // optimizer has not stepped yet has none. max(n) and max(-n) in one call.
  double extent[2] = {double(numel), -double(numel)};
  std::string why;
  if (comm_->allreduce(extent, 2, LOOM_DTYPE_F64, LOOM_REDUCE_MAX, deadline, &why) != LOOM_OK) {
    log(Level::warn, std::string(reason) + ": averaging the optimizer's statistics failed (" + why + ")");
    return;
  }
  if (extent[0] != -extent[1]) {
    log(Level::warn, std::string(reason) + ": the group's optimizer statistics differ in size (" +
                         std::to_string(uint64_t(-extent[1])) + " to " + std::to_string(uint64_t(extent[0])) +
                         " values); not averaged");
    return;
  }
  if (numel == 0) return;
  if (!average_views(views, deadline, &why)) {
    log(Level::warn, std::string(reason) + ": averaging the optimizer's statistics failed (" + why + "); keeping this peer's");
    return;
  }
  detail(std::string(reason) + ": averaged the optimizer's statistics (" + std::to_string(count) + " tensors) with " +
         std::to_string(comm_->size()) + " peers");
}

}  // namespace loom_collab
