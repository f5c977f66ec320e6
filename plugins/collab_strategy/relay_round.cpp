// SPDX-License-Identifier: Apache-2.0
// Rounds through a relay (relay.h). A client-mode peer sends its weighted
// gradients to a full peer and takes back the mean its group averaged; the
// full peer folds every contribution that arrived for the epoch into its
// own before its group exchanges weights, so the group's targets, top-ups
// and means count the clients' samples exactly as its members'.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "peer.h"

namespace loom_collab {

// ---- The relay's side ---------------------------------------------------------

void Peer::relay_contribution(const std::string &client, RelayMessage &m, const std::function<bool()> &stop) {
  auto answer = [&](RelayStatus status, const std::string &why) {
    m.status = status;
    m.values.clear();
    m.weight = 0;
    m.why = why;
    if (status == RelayStatus::refused)
      log_limited(Level::warn, "relay refused " + client + ": " + why,  // each reason its own limit
                  "client-mode peer " + client + "'s contribution at epoch " +
                                                               std::to_string(m.epoch) + " was refused: " + why);
    else
      detail("client-mode peer " + client + "'s contribution at epoch " + std::to_string(m.epoch) + " missed: " + why);
  };
  const bool parameters = m.kind == RelayKind::parameters;
  const uint64_t expected = parameters ? state_numel_ : numel_;
  if (m.values.size() != expected)
    return answer(RelayStatus::refused, "it sent " + std::to_string(m.values.size()) + " values; this model has " +
                                            std::to_string(expected) + (parameters ? " parameters and buffers" : ""));
  if (!(m.weight > 0) || !std::isfinite(m.weight) || m.weight > (parameters ? 1.0 : 1e15))
    return answer(RelayStatus::refused, "its weight " + number_text(m.weight) + (parameters ? " is not 1" : " is not a positive sample count"));
  if (m.codec != Codec::none && !parameters) {
    // Encoded, a contribution carries its mean (fp16 may not hold weight x
    // mean): weighed here, as every other contribution comes.
    const float w = float(m.weight);
    for (float &v : m.values) v *= w;
  }
  const double squares = sum_of_squares(m.values.data(), m.values.size());
  if (!std::isfinite(squares))
    return answer(RelayStatus::refused, std::string("its ") + (parameters ? "parameters" : "gradients") + " are not finite");
  // The norm a client states is not trusted: the relay's outlier rule uses
  // the one its values have (of the mean: values are weight x mean).
  if (!parameters) m.norm = std::sqrt(squares) / m.weight;
  auto entry = std::make_shared<RelayEntry>();
  entry->client = client;
  entry->kind = m.kind;
  entry->peer = m.peer;
  entry->epoch = m.epoch;
  entry->weight = m.weight;
  entry->norm = m.norm;
  entry->values = std::move(m.values);
  // Bounded: a round that took the entry answers within averaging_timeout
  // of its start, and a round that fell short meets again about as soon.
  const auto until = Clock::now() + std::chrono::milliseconds(int64_t(
                                        (2 * opt_.averaging_timeout + opt_.matchmaking_time) * 1000) + 10000);
  std::unique_lock<std::mutex> lock(relay_mutex_);
  relay_inbox_.push_back(entry);
  relay_arrived_.push_back(m.peer);
  relay_cv_.notify_all();  // a round may wait for it
  bool done = false;
  while (!done) {
    if (entry->answered) {
      m = std::move(entry->result);
      done = true;
      break;
    }
    if (!parameters && !entry->taken && epoch_.load() > entry->epoch && relay_last_epoch_ == entry->epoch &&
        relay_last_mean_) {
      // Too late for its round: that round's mean, so it steps as the swarm did.
      m.status = relay_last_resync_ ? RelayStatus::resync : RelayStatus::averaged;
      m.epoch = entry->epoch;
      m.weight = relay_last_total_;
      m.values = *relay_last_mean_;
      if (relay_last_resync_) {
        m.norm = double(relay_last_steps_);
        m.codec = Codec::none;
      }
      m.why.clear();
      done = true;
      break;
    }
    if (!entry->taken && (epoch_.load() > entry->epoch || stopping())) break;
    if (stop() || Clock::now() >= until) break;
    relay_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  relay_inbox_.erase(std::remove(relay_inbox_.begin(), relay_inbox_.end(), entry), relay_inbox_.end());
  lock.unlock();
  if (done && !entry->answered)
    detail("client-mode peer " + client + "'s contribution at epoch " + std::to_string(entry->epoch) +
           " came after its round: it gets that round's mean");
  if (done) return;
  m.epoch = epoch_.load();  // a miss says where this relay is: the client follows, or loads the state
  answer(RelayStatus::missed, stop() ? "this peer is shutting down"
                              : stopping() ? "this peer is leaving"
                              : entry->taken ? "this peer's round did not end in time"
                                             : "this peer finished epoch " + std::to_string(entry->epoch) +
                                                   " before the contribution came");
}

double Peer::take_relayed(int64_t epoch, double own_norm) {
  // The clients this peer relayed for lately that train at this epoch (by
  // their records): their contributions are on their way, since a client
  // sends at its share of the target as a member reaches its own. Without
  // the wait the members could reach the target among themselves first and
  // the clients' samples would miss every round. A moment only: a client
  // that does not come costs its relay this once per round.
  {
    std::lock_guard<std::mutex> lock(relay_mutex_);
    for (uint64_t id : relay_arrived_) relay_clients_[id] = epoch;
    relay_arrived_.clear();
  }
  // One epoch behind counts too: records lag, and a client that just
  // followed the swarm or loaded its state sends at this epoch next.
  std::vector<uint64_t> awaited;
  if (!relay_clients_.empty()) {
    const SwarmView v = view();
    for (const auto &r : v.others)
      if ((r.flags & ProgressRecord::kClient) && !(r.flags & ProgressRecord::kAway) &&
          (r.epoch == epoch || r.epoch + 1 == epoch) && relay_clients_.count(r.peer_id))
        awaited.push_back(r.peer_id);
  }
  const auto until = Clock::now() + std::chrono::milliseconds(int64_t(std::min(1.0, opt_.matchmaking_time) * 1000));
  std::unique_lock<std::mutex> lock(relay_mutex_);
  for (;;) {
    for (auto &e : relay_inbox_) {
      if (e->taken || e->answered || e->epoch != epoch || e->kind != RelayKind::gradients) continue;
      // The group's outlier rule sees this relay's own norm only, so the
      // relay applies it to its clients itself.
      if (own_norm > 0 && std::isfinite(own_norm) && e->norm > kOutlierFactor * own_norm) {
        e->result.status = RelayStatus::refused;
        e->result.epoch = epoch;
        e->answered = true;
        log_limited(Level::warn, "relay outlier " + e->client,
                    "client-mode peer " + e->client + " brought gradients of norm " + number_text(e->norm) + ", over " +
                        number_text(kOutlierFactor) + " times this relay's " + number_text(own_norm) + ": not counted");
        continue;
      }
      e->taken = true;
      if (relayed_sum_.size() != numel_) relayed_sum_.assign(numel_, 0.0f);
      for (uint64_t i = 0; i < numel_; ++i) relayed_sum_[i] += e->values[i];
      relayed_weight_ += e->weight;
      relay_taken_.push_back(e);
    }
    const bool all = std::all_of(awaited.begin(), awaited.end(), [&](uint64_t id) {
      return std::any_of(relay_taken_.begin(), relay_taken_.end(), [&](const auto &e) { return e->peer == id; });
    });
    if (all || Clock::now() >= until || stopping()) break;
    relay_cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
  relay_cv_.notify_all();
  // Forget clients not seen for a while (they left, or chose another relay).
  for (auto it = relay_clients_.begin(); it != relay_clients_.end();)
    it = it->second + 10 < epoch ? relay_clients_.erase(it) : std::next(it);
  return relayed_weight_;
}

void Peer::answer_relayed(RoundEnd end, bool resync) {
  const bool clients = server_ && server_->relaying() > 0;
  if (relay_taken_.empty() && !(clients && end == RoundEnd::averaged)) return;
  std::vector<float> mean;
  if (end == RoundEnd::averaged) {
    // A resync brings the group's agreed outer state after the mean, so the
    // client takes it and steps as its relay does, instead of loading the
    // whole state (whose anchor may come from another group by then).
    const bool outer = resync && outer_.anchor.size() == numel_ && outer_.momentum.size() == numel_;
    mean.resize(outer ? 3 * numel_ : numel_);
    size_t at = 0;
    for (const auto &g : grads_) {
      std::memcpy(mean.data() + at, g.data, g.numel * sizeof(float));
      at += g.numel;
    }
    if (outer) {
      std::memcpy(mean.data() + numel_, outer_.anchor.data(), numel_ * sizeof(float));
      std::memcpy(mean.data() + 2 * numel_, outer_.momentum.data(), numel_ * sizeof(float));
    }
    std::lock_guard<std::mutex> lock(relay_mutex_);
    relay_last_epoch_ = epoch_.load();
    relay_last_total_ = relay_total_;
    relay_last_mean_ = std::make_shared<const std::vector<float>>(mean);
    relay_last_resync_ = resync;
    relay_last_steps_ = outer_.steps;
  }
  if (relay_taken_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(relay_mutex_);
    for (auto &e : relay_taken_) {
      RelayMessage &r = e->result;
      r.kind = RelayKind::gradients;
      r.epoch = e->epoch;
      if (end == RoundEnd::averaged && resync) {
        r.status = RelayStatus::resync;
        r.weight = relay_total_;
        r.norm = double(outer_.steps);
        r.values = mean;
        r.codec = Codec::none;  // an anchor must not be rounded
        relay_served_.push_back(e->peer);
      } else if (end == RoundEnd::averaged) {
        r.status = RelayStatus::averaged;
        r.weight = relay_total_;
        r.values = mean;
        relay_served_.push_back(e->peer);
      } else {
        r.status = RelayStatus::missed;
        r.why = "this relay's round did not average";
      }
      e->values.clear();
      e->values.shrink_to_fit();
      e->answered = true;
    }
  }
  relay_cv_.notify_all();
  detail("epoch " + std::to_string(relay_taken_.front()->epoch) + ": answered " + std::to_string(relay_taken_.size()) +
         " client-mode peer(s) relayed through this peer (" +
         (end != RoundEnd::averaged ? "missed" : resync ? "averaged; they load the outer state" : "averaged") + ")");
  relay_taken_.clear();
  relayed_sum_.clear();
  relayed_weight_ = 0;
}

double Peer::take_relayed_parameters(int64_t epoch, double drift, std::vector<float> *sum) {
  // The clients served this epoch step as this peer did and send their
  // parameters right after: a moment's wait brings them.
  std::vector<uint64_t> awaited;
  awaited.swap(relay_served_);
  double weight = 0;
  const auto until = Clock::now() + std::chrono::milliseconds(int64_t(std::min(1.0, opt_.matchmaking_time) * 1000));
  // A client's parameters may lie no further from this peer's than the
  // outlier rule lets a member drift (kParameterOutlierFactor times this
  // peer's own drift since it last synced): a client sending arbitrary
  // values moves nobody's.
  auto distance = [&](const std::vector<float> &values) {
    double s = 0;
    size_t at = 0;
    for (const auto &p : params_) {
      for (uint64_t i = 0; i < p.numel; ++i) {
        const double d = double(values[at + i]) - double(p.data[i]);
        s += d * d;
      }
      at += p.numel;
    }
    return std::sqrt(s);
  };
  std::unique_lock<std::mutex> lock(relay_mutex_);
  for (;;) {
    for (auto &e : relay_inbox_) {
      if (e->taken || e->answered || e->epoch != epoch || e->kind != RelayKind::parameters) continue;
      const double d = distance(e->values);
      if (drift > 0 && std::isfinite(drift) && !(d <= kParameterOutlierFactor * drift)) {
        e->result.status = RelayStatus::refused;
        e->result.epoch = epoch;
        e->answered = true;
        log_limited(Level::warn, "relay parameters " + e->client,
                    "client-mode peer " + e->client + "'s parameters lie " + number_text(d) + " from this relay's, over " +
                        number_text(kParameterOutlierFactor) + " times its own drift since it synced (" + number_text(drift) +
                        "): not averaged");
        continue;
      }
      e->taken = true;
      if (sum->size() != state_numel_) sum->assign(state_numel_, 0.0f);
      for (uint64_t i = 0; i < state_numel_; ++i) (*sum)[i] += float(e->weight) * e->values[i];
      weight += e->weight;
      relay_params_taken_.push_back(e);
    }
    const bool all = std::all_of(awaited.begin(), awaited.end(), [&](uint64_t id) {
      return std::any_of(relay_params_taken_.begin(), relay_params_taken_.end(), [&](const auto &e) { return e->peer == id; });
    });
    if (all || Clock::now() >= until || stopping()) break;
    relay_cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
  return weight;
}

void Peer::answer_relayed_parameters(const std::vector<FloatView> &views, bool averaged) {
  if (relay_params_taken_.empty()) return;
  std::vector<float> mean;
  if (averaged) {
    mean.reserve(state_numel_);
    for (const auto &v : views) mean.insert(mean.end(), v.data, v.data + v.numel);
  }
  {
    std::lock_guard<std::mutex> lock(relay_mutex_);
    for (auto &e : relay_params_taken_) {
      RelayMessage &r = e->result;
      r.kind = RelayKind::parameters;
      r.epoch = e->epoch;
      r.status = averaged && mean.size() == state_numel_ ? RelayStatus::averaged : RelayStatus::missed;
      if (r.status == RelayStatus::averaged) r.values = mean;
      e->values.clear();
      e->values.shrink_to_fit();
      e->answered = true;
    }
  }
  relay_cv_.notify_all();
  relay_params_taken_.clear();
}

bool Peer::relay_parameters(int64_t epoch) {
  if (!relay_link_) return false;
  std::vector<FloatView> views = params_;
  append_buffer_views(&views);
  RelayMessage m;
  m.kind = RelayKind::parameters;
  m.epoch = epoch;
  m.weight = 1;
  m.norm = drift_since_sync();
  m.peer = id_;
  m.values.reserve(state_numel_);
  for (const auto &v : views) m.values.insert(m.values.end(), v.data, v.data + v.numel);
  std::string why;
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(opt_.averaging_timeout * 1000) + 5000);
  if (!relay_link_->exchange(m, state_numel_, deadline, &why)) {
    relay_link_.reset();
    log_limited(Level::info, "relay parameters", "epoch " + std::to_string(epoch) + ": state averaging through the relay failed: " + why);
    return false;
  }
  if (m.status != RelayStatus::averaged || m.values.size() != state_numel_ ||
      !std::isfinite(sum_of_squares(m.values.data(), m.values.size()))) {
    detail("epoch " + std::to_string(epoch) + ": the relay's state averaging went without this peer");
    return false;
  }
  size_t at = 0;
  for (auto &v : views) {
    std::memcpy(v.data, m.values.data() + at, v.numel * sizeof(float));
    at += v.numel;
  }
  mark_synced();
  detail("epoch " + std::to_string(epoch) + ": averaged the parameters through relay peer " + std::to_string(relay_peer_));
  return true;
}

// ---- The client's side --------------------------------------------------------

bool Peer::open_relay(Clock::time_point deadline, std::string *why) {
  const SwarmView v = view();
  std::vector<const ProgressRecord *> picks;
  for (const auto &r : v.others)
    if (!(r.flags & (ProgressRecord::kAway | ProgressRecord::kClient)) && r.state_port != 0 && !r.state_host.empty() &&
        r.epoch >= epoch_.load())
      picks.push_back(&r);
  if (picks.empty()) {
    *why = "no full peer at this epoch to relay through (client_mode needs at least one peer that accepts connections)";
    return false;
  }
  // The last relay first, then a spread of the others (each client its own order).
  const uint64_t me = id_, last = relay_peer_;
  std::sort(picks.begin(), picks.end(), [&](const ProgressRecord *a, const ProgressRecord *b) {
    if ((a->peer_id == last) != (b->peer_id == last)) return a->peer_id == last;
    return mix64(a->peer_id ^ me) < mix64(b->peer_id ^ me);
  });
  std::string tried;
  for (const auto *r : picks) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    std::string reason;
    relay_link_ = RelayLink::open(r->state_host, r->state_port, run_, opt_.swarm_key,
                                  std::min(left, std::chrono::milliseconds(3000)), &reason);
    if (relay_link_) {
      if (r->peer_id != relay_peer_)
        log(Level::info, "client mode: relaying this peer's rounds through peer " + std::to_string(r->peer_id) +
                             " at " + relay_link_->peer());
      relay_peer_ = r->peer_id;
      return true;
    }
    tried += (tried.empty() ? "" : "; ") + reason;
  }
  *why = "no full peer took this peer as its client (" + tried + ")";
  return false;
}

RoundEnd Peer::relay_gradients(double weight, double norm) {
  const int64_t epoch = epoch_.load();
  const double windows = double(std::max<uint64_t>(1, windows_));
  const auto start = Clock::now();
  // The relay answers once its round is over: its matchmaking, its
  // averaging, and a meeting again when its group fell short; under local
  // updates also the group's agreement on the outer state (which may
  // average it) and its buffers, each within averaging_timeout.
  const double rounds = opt_.local_updates ? 3 : 1;
  const auto deadline = start + std::chrono::milliseconds(int64_t(
                                    (rounds * opt_.averaging_timeout + opt_.matchmaking_time) * 1000) + 5000);
  auto alone = [&](const std::string &why) {
    client_missed_ = true;
    if (why != last_local_reason_)
      log(Level::info, "epoch " + std::to_string(epoch) + ": " + why + "; proceeding with local gradients (said once until it changes)");
    last_local_reason_ = why;
    const float inv = float(1.0 / windows);
    for (auto &g : grads_)
      for (uint64_t i = 0; i < g.numel; ++i) g.data[i] *= inv;
    return RoundEnd::alone;
  };
  if (!(weight > 0)) return alone("this peer has nothing to contribute (it diverged)");
  std::string why;
  if (!relay_link_ && !open_relay(start + std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000) + 3000), &why))
    return alone(why);
  RelayMessage m;
  m.kind = RelayKind::gradients;
  m.epoch = epoch;
  m.weight = weight;
  m.norm = norm;
  m.peer = id_;
  m.values.resize(numel_);
  // In the swarm's compression, the mean (the relay weighs it); else weight x mean.
  m.codec = opt_.compression;
  const float k = opt_.compression != Codec::none ? float(1.0 / windows) : float(weight / windows);
  size_t at = 0;
  for (const auto &g : grads_) {
    for (uint64_t i = 0; i < g.numel; ++i) m.values[at + i] = g.data[i] * k;
    at += g.numel;
  }
  // Under local updates a resync may bring the outer state too (3 vectors).
  if (!relay_link_->exchange(m, opt_.local_updates ? 3 * numel_ : numel_, deadline, &why)) {
    relay_link_.reset();
    return alone(why);
  }
  switch (m.status) {
    case RelayStatus::averaged:
      if (m.values.size() != numel_ || !std::isfinite(sum_of_squares(m.values.data(), m.values.size()))) {
        relay_link_.reset();
        return alone("the relay's result has " + std::to_string(m.values.size()) + " values, or values that are not finite");
      }
      at = 0;
      for (auto &g : grads_) {
        std::memcpy(g.data, m.values.data() + at, g.numel * sizeof(float));
        at += g.numel;
      }
      detail("epoch " + std::to_string(epoch) + ": averaged gradients of " + std::to_string(uint64_t(m.weight)) +
             " samples through relay peer " + std::to_string(relay_peer_) + " (" +
             milliseconds_text(Clock::now() - start) + " ms" +
             (m.codec != Codec::none ? std::string(", in ") + codec_name(m.codec) : "") + ")");
      last_local_reason_.clear();
      return RoundEnd::averaged;
    case RelayStatus::resync:
      // Local updates: the group stepped from the mean of differing outer
      // states, which this peer's own is not. With that state in the
      // answer, it takes it and steps with the mean as its relay does;
      // else it loads the state after.
      if (opt_.local_updates && m.values.size() == 3 * numel_ && m.norm >= 0 &&
          std::isfinite(sum_of_squares(m.values.data(), m.values.size()))) {
        outer_.anchor.assign(m.values.begin() + int64_t(numel_), m.values.begin() + int64_t(2 * numel_));
        outer_.momentum.assign(m.values.begin() + int64_t(2 * numel_), m.values.end());
        outer_.steps = uint64_t(m.norm);
        copy_into_views(m.values.data(), grads_);  // the mean comes first
        detail("epoch " + std::to_string(epoch) + ": averaged gradients of " + std::to_string(uint64_t(m.weight)) +
               " samples through relay peer " + std::to_string(relay_peer_) + " (" +
               milliseconds_text(Clock::now() - start) + " ms), taking its group's outer state (the group's " +
               "members held differing ones)");
        last_local_reason_.clear();
        return RoundEnd::averaged;
      }
      client_jump_to_ = epoch + 1;
      client_missed_ = true;  // until a load succeeds: nothing else brings its anchor back
      detail("epoch " + std::to_string(epoch) + ": averaged through relay peer " + std::to_string(relay_peer_) +
             ", whose group took the mean of differing outer states; loading the swarm's state");
      last_local_reason_.clear();
      return RoundEnd::moved_on;
    case RelayStatus::missed:
      // Its relay is past this epoch (the reply says where): the client
      // goes there at once with these gradients, so that its next
      // contribution comes in time (following one epoch at a time, a client
      // that loaded a sync point's state in a fast swarm never caught up);
      // the parameters, behind by the rounds it missed, are made up at the
      // next sync point.
      client_missed_ = true;
      client_jump_to_ = std::max(epoch + 1, m.epoch);
      detail("epoch " + std::to_string(epoch) + ": the relay's round went without this peer (the relay is at epoch " +
             std::to_string(m.epoch) + "); its gradients count there");
      return RoundEnd::moved_on;
    default:
      relay_link_.reset();  // another relay next time
      return alone("the relay refused this peer's contribution (its log says why)");
  }
}

}  // namespace loom_collab
