// A peer's health and its model: healing after a non-finite loss, the
// fingerprint it publishes, and the check that it trains the swarm's model.
#include <cmath>

#include "peer.h"

namespace loom_collab {
namespace {

constexpr int64_t kLimitedEveryMs = 60 * 1000;
constexpr int64_t kHealEveryMs = 2000;  // a failed reload is retried this often, at most
constexpr int64_t kFingerprintEveryMs = 60 * 1000;
constexpr auto kFingerprintTtl = std::chrono::minutes(5);
constexpr int64_t kMisfitConfirmMs = 1500;

}  // namespace

void Peer::log_limited(Level level, const std::string &key, const std::string &message) const {
  const int64_t now = wall_ms();
  uint64_t held = 0;
  {
    std::lock_guard<std::mutex> lock(limited_mutex_);
    Limited &l = limited_[key];
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
  if (load_state(epoch_.load(), &why)) {
    log(Level::info, "healed: this peer trains on from the swarm's state of epoch " + std::to_string(epoch_.load()));
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
  FingerprintRecord r;
  r.fingerprint = fingerprint_;
  r.text = fingerprint_text_.substr(0, kMaxFingerprintText);
  r.truncated = fingerprint_text_.size() > kMaxFingerprintText;
  if (dht_->put(fingerprint_key(opt_.run_id, fingerprint_), id_, encode(run_, r), kFingerprintTtl,
                std::chrono::milliseconds(1000)))
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
  if (misfit_.empty())
    misfit_ = "this peer trains another model than the swarm of run '" + opt_.run_id + "': " + difference +
              ". Fix this peer's configuration to match the swarm's, or give it another run_id";
}

bool Peer::misfit(std::string *why) const {
  std::lock_guard<std::mutex> lock(misfit_mutex_);
  if (misfit_.empty()) return false;
  *why = misfit_;
  return true;
}

}  // namespace loom_collab
