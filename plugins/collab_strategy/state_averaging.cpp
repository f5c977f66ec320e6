// SPDX-License-Identifier: Apache-2.0
// State averaging: a group's parameters and buffers (weighted by health,
// with the clients relaying through this peer) and, with
// average_optimizer_state, the optimizer's statistics; the parameters this
// peer last synced to, and how far it drifted from them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "peer.h"
#include "scale_kernels.h"

namespace loom_collab {

bool Peer::average_views(std::vector<FloatView> &views, const MemberWeights &members, Clock::time_point deadline,
                         Codec codec, std::string *why, const std::vector<float> *relayed, double relayed_weight,
                         const float *reference) {
  const double total = members.total;
  // This member's own weight: what it announced less what its clients bring.
  const double mine = std::max(0.0, members.weight[size_t(comm_->rank())] - (relayed ? relayed_weight : 0.0));
  const bool with_relayed = relayed && relayed_weight > 0 && members.weight[size_t(comm_->rank())] > 0;
  uint64_t numel = 0;
  for (const auto &v : views) numel += v.numel;
  scratch_.resize(numel);
  if (opt_.centered_clip || codec != Codec::none) {
    // As the gradients' sliced round: each member's values as they are,
    // combined by CenteredClip or the weighted mean over the members that
    // count.
    size_t at = 0;
    for (const auto &v : views) {
      std::memcpy(scratch_.data() + at, v.data, v.numel * sizeof(float));
      at += v.numel;
    }
    if (with_relayed) {  // this member's value: the weighted mean of its own and its clients'
      const double all = mine + relayed_weight;
      for (uint64_t i = 0; i < numel; ++i)
        scratch_[i] = float((double(scratch_[i]) * mine + double((*relayed)[i])) / all);
    }
    // Members that share a reference send their drift from it: a weighted
    // mean of (x - reference) is the mean less the reference, and a lossy
    // codec then rounds to the drift's scale instead of the weights'.
    const uint64_t referenced = reference ? std::min<uint64_t>(numel, numel_) : 0;
    for (uint64_t i = 0; i < referenced; ++i) scratch_[i] -= reference[i];
    if (!sliced_average(*comm_, scratch_.data(), numel, members.weight, scratch_.data(), codec, deadline, why))
      return false;
    for (uint64_t i = 0; i < referenced; ++i) scratch_[i] += reference[i];
    at = 0;
    for (auto &v : views) {
      std::memcpy(v.data, scratch_.data() + at, v.numel * sizeof(float));
      at += v.numel;
    }
    return true;
  }
  size_t at = 0;
  for (const auto &v : views) {
    if (mine > 0) scale_into(scratch_.data() + at, v.data, v.numel, float(mine));
    else std::fill(scratch_.begin() + at, scratch_.begin() + at + v.numel, 0.0f);
    at += v.numel;
  }
  if (with_relayed)
    for (uint64_t i = 0; i < numel; ++i) scratch_[i] += (*relayed)[i];
  if (comm_->allreduce_sum(scratch_.data(), numel, deadline, why) != LOOM_OK) return false;
  at = 0;
  for (auto &v : views) {
    divide_into(v.data, scratch_.data() + at, v.numel, float(total));
    at += v.numel;
  }
  return true;
}

void Peer::mark_synced() {
  synced_epoch_ = epoch_.load();
  synced_.resize(numel_);
  copy_from_views(params_, synced_.data());
  if (opt_.state_compression != Codec::none) {
    Digest d;
    d.update(synced_.data(), synced_.size() * sizeof(float));
    synced_digest_ = d.finish();
  }
}

bool same_digest(GroupComm &comm, uint64_t digest, double flag, Clock::time_point deadline, bool *same,
                 double *flag_max, std::string *why) {
  // max and -min of the digest's halves (exact in a double), and the flag's max.
  const double hi = double(digest >> 32), lo = double(digest & 0xffffffffu);
  double x[5] = {hi, lo, -hi, -lo, flag};
  if (comm.allreduce(x, 5, LOOM_DTYPE_F64, LOOM_REDUCE_MAX, deadline, why) != LOOM_OK) return false;
  *same = x[0] == -x[2] && x[1] == -x[3];
  *flag_max = x[4];
  return true;
}

bool Peer::same_reference(Clock::time_point deadline, bool *same, std::string *why) {
  // The flag: whether a member lacks a reference.
  double lacking = 0;
  if (!same_digest(*comm_, synced_digest_, synced_.size() == numel_ ? 0.0 : 1.0, deadline, same, &lacking, why))
    return false;
  *same = *same && lacking == 0;
  return true;
}

double Peer::drift_since_sync() const {
  if (synced_.size() != numel_) return 0;  // never synced: nothing to compare with
  double s = 0;
  size_t at = 0;
  for (const auto &p : params_) {
    for (uint64_t i = 0; i < p.numel; ++i) {
      const double d = double(p.data[i]) - double(synced_[at + i]);
      s += d * d;
    }
    at += p.numel;
  }
  return std::sqrt(s);
}

void Peer::average_parameters(const char *reason) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000));
  std::string why;
  // The model's buffers (BatchNorm statistics, ABI 1.4) go with the
  // parameters in the same allreduce.
  std::vector<FloatView> views = params_;
  const size_t buffers = append_buffer_views(&views);
  // Each member counts 1, or 0 when it diverged since it last loaded the
  // swarm's state (its parameters may be finite but huge) or its drift since
  // it last synced is an outlier (health.h); those take the others' mean.
  // Members compare it per epoch since then: members that synced at
  // different times drift apart by their steps, not their health. In a
  // group of two, one whose last sync was many epochs back (it had followed
  // the swarm) drifted 1.42, over 10 times its partner's (whose drift was
  // not logged), and was taken for diverged (64-peer run 25); a peer whose
  // learning rate is 10^5 times too high (health.h: 3.4 against 1e-5) is
  // still as far over per step (reasoned, not measured). Clients' parameters
  // are still judged against the whole drift (their distance from this
  // peer's parameters is not per epoch).
  const double drift = drift_since_sync();
  const double drift_per_epoch = drift / double(std::max<int64_t>(1, epoch_.load() - synced_epoch_));
  // Clients relaying through this peer average theirs with it.
  std::vector<float> relayed;
  const double relayed_weight =
      unhealthy_ || views_numel(views) != state_numel_ ? 0.0 : take_relayed_parameters(epoch_.load(), drift, &relayed);
  struct Answer {  // every path out answers the clients taken
    Peer *p;
    const std::vector<FloatView> &v;
    bool averaged = false;
    ~Answer() { p->answer_relayed_parameters(v, averaged); }
  } answer{this, views};
  MemberWeights members;
  if (!exchange_weights(*comm_, unhealthy_ ? 0.0 : 1.0 + relayed_weight,
                        std::isfinite(drift_per_epoch) ? drift_per_epoch : -1.0, deadline,
                        &members, &why, kParameterOutlierFactor)) {
    log_limited(Level::warn, "state averaging", std::string(reason) + ": parameter averaging failed (" + why +
                                                    "); keeping this peer's");
    return;
  }
  const double mine = members.weight[size_t(comm_->rank())];
  if (members.total <= 0) {
    log_limited(Level::warn, "state averaging empty",
                std::string(reason) + ": no member's parameters were healthy; each keeps its own");
    return;
  }
  // Under a lossy codec, the drift from the parameters every member last
  // synced to, when they all hold the same.
  bool drift_coded = false;
  if (opt_.state_compression != Codec::none && !same_reference(deadline, &drift_coded, &why)) {
    log_limited(Level::warn, "state averaging", std::string(reason) + ": parameter averaging failed (" + why +
                                                    "); keeping this peer's");
    return;
  }
  if (!average_views(views, members, deadline, opt_.state_compression, &why, &relayed, relayed_weight,
                     drift_coded ? synced_.data() : nullptr)) {
    log_limited(Level::warn, "state averaging", std::string(reason) + ": parameter averaging failed (" + why +
                                                    "); keeping this peer's");
    return;
  }
  answer.averaged = true;
  mark_synced();
  detail(std::string(reason) + ": averaged the parameters" + (buffers ? " and " + std::to_string(buffers) + " buffers" : "") +
         " with " + std::to_string(comm_->size()) + " peers" +
         (opt_.state_compression == Codec::none ? ""
          : drift_coded ? std::string(" in ") + codec_name(opt_.state_compression) + ", as drift from the last synced state"
                        : std::string(" in ") + codec_name(opt_.state_compression)) +
         (mine > 0 ? "" : " (this peer's own counted 0: it took the others' mean)"));
  if (opt_.average_optimizer_state) average_optimizer_state(reason, members, deadline);
}

size_t Peer::append_buffer_views(std::vector<FloatView> *views) {
  if (state_.struct_size < LOOM_TRAINING_STATE_V1_4_SIZE || state_.buffers == nullptr) return 0;
  const DLTensor *tensors = nullptr;
  uint32_t count = 0;
  if (state_.buffers(state_.user, &tensors, &count) != LOOM_OK) {
    log_limited(Level::warn, "buffers", "the host could not lend the model's buffers; they are not averaged");
    return 0;
  }
  size_t added = 0;
  for (uint32_t i = 0; i < count; ++i) {
    FloatView v;
    if (!float_view(tensors[i], &v)) {
      log_limited(Level::warn, "buffer " + std::to_string(i),
                  "buffer " + std::to_string(i) + " is not a compact float32 CPU tensor; it is not averaged");
      continue;
    }
    views->push_back(v);
    ++added;
  }
  return added;
}

void Peer::average_optimizer_state(const char *reason, const MemberWeights &members, Clock::time_point deadline) {
  if (state_.struct_size < LOOM_TRAINING_STATE_V1_2_SIZE || state_.optimizer_state == nullptr) return;  // said at setup
  const DLTensor *tensors = nullptr;
  uint32_t count = 0;
  if (state_.optimizer_state(state_.user, &tensors, &count) != LOOM_OK) {
    log_limited(Level::warn, "optimizer state", std::string(reason) + ": the host could not lend the optimizer's statistics; not averaged");
    return;
  }
  std::vector<FloatView> views(count);
  uint64_t numel = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (!float_view(tensors[i], &views[i])) {
      log_limited(Level::warn, "optimizer state", std::string(reason) + ": optimizer statistic " + std::to_string(i) +
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
    log_limited(Level::warn, "optimizer state", std::string(reason) + ": averaging the optimizer's statistics failed (" + why + ")");
    return;
  }
  if (extent[0] != -extent[1]) {
    log_limited(Level::warn, "optimizer state size",
                std::string(reason) + ": the group's optimizer statistics differ in size (" +
                    std::to_string(uint64_t(-extent[1])) + " to " + std::to_string(uint64_t(extent[0])) +
                    " values); not averaged");
    return;
  }
  if (numel == 0) return;
  // In f32 whatever state_compression says: Adam's second moments span
  // magnitudes that fp16 or a linear 8-bit block flushes to zero, and a
  // zeroed second moment makes the next step m / eps.
  if (!average_views(views, members, deadline, Codec::none, &why)) {
    log_limited(Level::warn, "optimizer state", std::string(reason) + ": averaging the optimizer's statistics failed (" + why + "); keeping this peer's");
    return;
  }
  detail(std::string(reason) + ": averaged the optimizer's statistics (" + std::to_string(count) + " tensors) with " +
         std::to_string(comm_->size()) + " peers");
}

}  // namespace loom_collab
