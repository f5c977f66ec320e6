// SPDX-License-Identifier: Apache-2.0
// A peer's health and its model: healing after a non-finite loss, the
// fingerprint it publishes, and the check that it trains the swarm's model.
#include <algorithm>
#include <cmath>
#include <optional>

#include "peer.h"

namespace loom_collab {
namespace {

constexpr int64_t kLimitedEveryMs = 60 * 1000;
constexpr size_t kLimitedKeys = 1024;  // distinct lines held back at once
constexpr int64_t kHealEveryMs = 2000;  // a failed reload is retried this often, at most
constexpr int64_t kFingerprintEveryMs = 60 * 1000;
constexpr int64_t kFingerprintRetryMs = 5 * 1000;  // after a put no node confirmed
constexpr auto kFingerprintTtl = std::chrono::minutes(5);
// Asking the initial peers for the swarm's model before joining: at most
// this long in all, and per peer.
constexpr double kPreflightSeconds = 3;
constexpr auto kPreflightPerPeer = std::chrono::milliseconds(1000);

}  // namespace

void Peer::log_limited(Level level, const std::string &key, const std::string &message) const {
  const int64_t now = wall_ms();
  uint64_t held = 0;
  {
    std::lock_guard<std::mutex> lock(limited_mutex_);
    if (limited_.size() >= kLimitedKeys) {
      // Keys are meant to be fixed phrases; should one ever carry a name
      // that others choose, forget the quiet ones so that it cannot grow
      // this map without bound.
      for (auto it = limited_.begin(); it != limited_.end();)
        it = now - it->second.last_ms >= kLimitedEveryMs ? limited_.erase(it) : std::next(it);
      if (limited_.size() >= kLimitedKeys && !limited_.count(key)) return;  // a flood: already said enough
    }
    LimitedLine &l = limited_[key];
    if (l.last_ms != 0 && now - l.last_ms < kLimitedEveryMs) {
      ++l.held;
      return;
    }
    held = l.held;
    l = {now, 0};
  }
  log(level, message + (held ? " (" + std::to_string(held) + " more like it in the last minute)" : ""));
}

void Peer::mark_unhealthy(const std::string &why) {
  if (!unhealthy_.exchange(true))
    log(Level::warn, why + ": this peer contributes nothing to the swarm and reloads the swarm's state from a healthy "
                           "peer (it heals rather than stopping)");
  wake_background();  // its record says so: no donor, nobody waits for it
}

bool Peer::alone_for_good() const {
  if (peers_seen() > 1) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto [held, youngest_ms] = tracker_.held(id_, wall_ms());
  return held == 0 || youngest_ms > kAloneMs;
}

void Peer::heal() {
  if (!unhealthy_) return;
  const int64_t now = wall_ms();
  if (now - last_heal_try_ms_ < kHealEveryMs) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tracker_.donors(id_, epoch_.load(), now).empty()) {
      // Nobody to heal from now (alone, every other peer diverged too, or
      // their records have not caught up with the round just finished):
      // waiting load_state_timeout for one would only stall this peer. The
      // next window tries again.
      log_limited(Level::info, "no donor", "no healthy peer at epoch " + std::to_string(epoch_.load()) +
                                               " or later to reload the state from yet; this peer contributes nothing meanwhile");
      return;
    }
  }
  last_heal_try_ms_ = now;
  drop_prematch();
  std::string why;
  // Of a slow swarm, the last sync point and a move to the swarm's epoch:
  // the next sync point may be further off than load_state_timeout.
  if (catch_up(std::max(epoch_.load(), view().global_epoch), true, &why)) {
    log(Level::info, "healed: this peer trains on from the swarm's state, at epoch " + std::to_string(epoch_.load()));
    return;
  }
  log_limited(Level::warn, "heal", "could not reload the swarm's state (" + why +
                                       "); this peer keeps contributing nothing and tries again");
}

bool Peer::views_finite(const std::vector<FloatView> &views) const {
  for (const auto &v : views)
    if (!std::isfinite(sum_of_squares(v.data, v.numel))) return false;
  return true;
}

bool Peer::state_finite() {
  std::vector<FloatView> views = params_;
  append_buffer_views(&views);
  return views_finite(views);
}

void Peer::publish_fingerprint() {
  const int64_t now = wall_ms();
  if (last_fingerprint_publish_ms_ != 0 && now - last_fingerprint_publish_ms_ < kFingerprintEveryMs) return;
  // An unconfirmed put blocks this thread for its timeout: not again at once.
  if (now - last_fingerprint_try_ms_ < kFingerprintRetryMs) return;
  last_fingerprint_try_ms_ = now;
  if (dht_->put(fingerprint_key(opt_.run_id, fingerprint_), id_, encode(run_, fingerprint_record(1), identity_),
                kFingerprintTtl, std::chrono::milliseconds(1000)))
    last_fingerprint_publish_ms_ = now;
}

void Peer::check_model(const std::vector<ProgressRecord> &foreign) {
  // Votes of the live peers this peer sees: itself, those training its model
  // (the tracker's) and the others (foreign).
  const SwarmView v = view();
  std::vector<ModelVote> votes{{fingerprint_, since_ms_}};
  for (const auto &r : v.others) votes.push_back({fingerprint_, r.since_ms});
  for (const auto &r : foreign) votes.push_back({r.fingerprint, r.since_ms});
  if (!foreign.empty() || !v.others.empty()) checked_model_ = true;
  const SwarmModel swarm = swarm_model(votes);
  if (swarm.fingerprint == fingerprint_) {
    misfit_seen_ms_ = 0;
    suspect_misfit_ = false;
    return;
  }
  suspect_misfit_ = true;
  // Records arrive one by one: the verdict must hold for a while (every
  // peer republishes each second) before this peer gives up.
  const int64_t now = wall_ms();
  if (misfit_seen_ms_ == 0) misfit_seen_ms_ = now;
  if (now - misfit_seen_ms_ < kMisfitConfirmMs) return;
  // This peer is the odd one out: name what differs.
  std::string difference;
  for (const auto &raw : dht_->get(fingerprint_key(opt_.run_id, swarm.fingerprint), std::chrono::milliseconds(1000))) {
    std::string reason;
    auto f = decode_fingerprint(run_, raw.data(), raw.size(), &reason);
    if (!f || f->fingerprint != swarm.fingerprint) continue;
    difference = first_difference(fingerprint_text_, f->text, swarm.peers, f->truncated);
    break;
  }
  if (difference.empty())
    difference = "its fingerprint differs from the one " + std::to_string(swarm.peers) +
                 " peers share (their description could not be read)";
  std::lock_guard<std::mutex> lock(misfit_mutex_);
  if (misfit_.empty()) misfit_ = misfit_text(difference);
}

std::string Peer::misfit_text(const std::string &difference) const {
  return "this peer trains another model than the swarm of run '" + opt_.run_id + "': " + difference +
         ". Fix this peer's configuration to match the swarm's, or give it another run_id";
}

// A misfit found here leaves before its DHT node exists. Found later, by
// check_model, its node has entered the others' routing tables, and once it
// is gone OpenDHT holds every new search near it for about 7 s (a request's
// three tries) before giving the node up: measured on loopback, two honest
// peers lost 7.7 s of a 10 s run to a misfit that left after 1.6 s.
bool Peer::preflight_model(std::string *why) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(int64_t(std::min(opt_.bootstrap_timeout, kPreflightSeconds) * 1000));
  std::string key_mismatch;  // the first initial peer that refused over the swarm key
  for (const auto &peer : opt_.initial_peers) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    std::string host, reason;
    uint16_t port = 0;
    if (!split_host_port(peer, &host, &port)) {
      detail("could not ask " + peer + " which model the swarm trains (not host:port)");
      continue;  // the DHT node refuses it next, naming it
    }
    KeyRefusal refusal = KeyRefusal::none;
    auto bytes =
        fetch_model(host, port, run_, std::min(left, kPreflightPerPeer), &reason, opt_.swarm_key, &refusal);
    std::optional<FingerprintRecord> f;
    if (bytes) f = decode_fingerprint(run_, bytes->data(), bytes->size(), &reason);
    if (refusal != KeyRefusal::none && key_mismatch.empty()) key_mismatch = key_mismatch_text(peer, refusal);
    if (!f) {
      detail("could not ask " + peer + " which model the swarm trains (" + reason + ")");
      continue;
    }
    if (f->fingerprint == fingerprint_) {
      detail(peer + " trains this peer's model, with " + std::to_string(f->peers - 1) + " other peer(s)");
      return true;
    }
    // The swarm's model is the one its oldest peers train: one peer that
    // asks is never the majority against those it asks.
    *why = misfit_text(first_difference(fingerprint_text_, f->text, f->peers, f->truncated));
    return false;
  }
  if (!key_mismatch.empty()) {
    // The swarm this peer was pointed at would never see it: say so now
    // rather than train alone.
    *why = key_mismatch;
    return false;
  }
  return true;  // nobody could tell: check_model decides once records arrive
}

std::string Peer::key_mismatch_text(const std::string &peer, KeyRefusal refusal) const {
  switch (refusal) {
    case KeyRefusal::lacks_key:
      return "the swarm of initial peer " + peer +
             " has a swarm key and this peer holds none: give it the swarm's key file (swarm_key = \"FILE\" under "
             "[strategy.options], or LOOM_SWARM_KEY=FILE)";
    case KeyRefusal::other_key:
      return "this peer's swarm key (" + opt_.swarm_key_path + ") is not the one of initial peer " + peer +
             "'s swarm: use the same key file as its peers";
    case KeyRefusal::swarm_has_none:
      return "the swarm of initial peer " + peer + " is open (it has no swarm key), and this peer has swarm_key = " +
             opt_.swarm_key_path + ": remove swarm_key, or join a swarm that uses this key";
    case KeyRefusal::none:
      break;
  }
  return "";
}

void Peer::serve_model() {
  if (!server_) return;
  // Only a model this peer is sure of: it started the swarm, or it has
  // compared models with the others and is not the odd one out.
  const bool sure = !suspect_misfit_ && (checked_model_ || opt_.initial_peers.empty());
  const uint32_t peers = sure ? static_cast<uint32_t>(std::min<size_t>(view().peers, kMaxPeers)) : 0;
  if (peers == served_model_peers_) return;
  served_model_peers_ = peers;
  if (peers == 0) {
    server_->publish_model({});
    return;
  }
  server_->publish_model(encode(run_, fingerprint_record(peers), identity_));
}

FingerprintRecord Peer::fingerprint_record(uint32_t peers) const {
  FingerprintRecord r;
  r.fingerprint = fingerprint_;
  r.text = fingerprint_text_.substr(0, kMaxFingerprintText);
  r.truncated = fingerprint_text_.size() > kMaxFingerprintText;
  r.peers = peers;
  return r;
}

bool Peer::misfit(std::string *why) const {
  std::lock_guard<std::mutex> lock(misfit_mutex_);
  if (misfit_.empty()) return false;
  *why = misfit_;
  return true;
}

}  // namespace loom_collab
