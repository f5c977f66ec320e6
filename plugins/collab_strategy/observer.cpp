// SPDX-License-Identifier: Apache-2.0
#include "observer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace loom_collab {
namespace {

constexpr size_t kMaxRoundsKept = 64;
constexpr size_t kMaxLossEpochsKept = 4096;

std::string state_of(const ProgressRecord &r) {
  if (r.flags & ProgressRecord::kCheckpointer) return "checkpointer";
  if (r.flags & ProgressRecord::kLoading) return "loading";
  if (r.flags & ProgressRecord::kUnhealthy) return "unhealthy";
  if (r.flags & ProgressRecord::kServing) return "serving";
  return "training";
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::string loss_text(double v) { return std::isfinite(v) ? fixed(v, 4) : (std::isnan(v) ? "nan" : "inf"); }

}  // namespace

void SwarmObserver::merge(const ProgressRecord &r) {
  if (!tracker_.merge(r)) return;  // older than what it holds
  if (r.last_round.epoch >= 0) {
    auto &round = rounds_[{r.last_round.epoch, r.last_round.group}];
    round.epoch = r.last_round.epoch;
    round.group = r.last_round.group;
    round.size = std::max(round.size, r.last_round.members);
    round.members_seen.insert(r.peer_id);
    round.samples = std::max(round.samples, r.last_round.samples);
    round.round_ms = std::max(round.round_ms, double(r.last_round.round_ms));
    round.matchmaking_ms = std::max(round.matchmaking_ms, double(r.last_round.matchmaking_ms));
    while (rounds_.size() > kMaxRoundsKept) rounds_.erase(rounds_.begin());
  }
  if (r.loss_epoch > losses_taken_through_ && r.loss_windows > 0) {
    losses_[r.loss_epoch][r.peer_id] = {double(r.epoch_loss), r.loss_windows};
    while (losses_.size() > kMaxLossEpochsKept) losses_.erase(losses_.begin());
  }
}

SwarmSnapshot SwarmObserver::snapshot(int64_t now_ms, size_t max_rounds) const {
  SwarmSnapshot s;
  s.time_ms = now_ms;
  // The observer is no peer: id 0 at epoch 0 with nothing of its own.
  const SwarmView v = tracker_.view(0, 0, 0, 0, now_ms);
  s.peers = tracker_.live_records(now_ms);  // by id; checkpointers too
  if (s.peers.empty()) return s;
  s.epoch = v.global_epoch;
  if (v.others.empty())  // checkpointers only: the epoch they hold
    for (const auto &p : s.peers) s.epoch = std::max(s.epoch, p.epoch);
  s.samples = v.samples;
  s.samples_per_second = v.rate;
  std::map<uint64_t, size_t> targets, fingerprints;
  double loss_sum = 0;
  size_t finite = 0;
  for (const auto &p : s.peers) {
    ++targets[p.target_batch_size];
    ++fingerprints[p.fingerprint];
    if (std::isfinite(p.last_loss)) {
      loss_sum += p.last_loss;
      ++finite;
    } else if (!std::isnan(p.last_loss) || p.loss_windows > 0) {
      // NaN is both "no loss yet" and a diverged peer's loss: a peer that
      // has trained an epoch and still reports NaN diverged.
      ++s.nonfinite_losses;
    }
  }
  if (finite > 0) s.mean_loss = loss_sum / double(finite);
  s.models = fingerprints.size();
  s.target_batch_size = std::max_element(targets.begin(), targets.end(), [](const auto &a, const auto &b) {
                          return a.second < b.second;
                        })->first;
  if (s.samples_per_second > 0)
    s.eta_s = double(s.target_batch_size > s.samples ? s.target_batch_size - s.samples : 0) / s.samples_per_second;
  for (auto it = rounds_.rbegin(); it != rounds_.rend() && s.rounds.size() < max_rounds; ++it)
    s.rounds.push_back(it->second);
  return s;
}

std::vector<SwarmObserver::EpochLoss> SwarmObserver::take_losses(int64_t before) {
  std::vector<EpochLoss> out;
  for (auto it = losses_.begin(); it != losses_.end() && it->first < before;) {
    if (it->first <= losses_taken_through_) {
      it = losses_.erase(it);
      continue;
    }
    EpochLoss e;
    e.epoch = it->first;
    double sum = 0;
    uint64_t finite_windows = 0;
    for (const auto &[peer, l] : it->second) {
      ++e.peers;
      e.windows += l.windows;
      if (!std::isfinite(l.loss)) {
        ++e.nonfinite;
        continue;
      }
      sum += l.loss * l.windows;
      finite_windows += l.windows;
    }
    if (finite_windows > 0) e.mean = sum / double(finite_windows);
    losses_taken_through_ = it->first;
    out.push_back(e);
    it = losses_.erase(it);
  }
  return out;
}

bool LossCsv::open(const std::string &path, int64_t *last_epoch, std::string *why) {
  path_ = path;
  *last_epoch = -1;
  std::ifstream in(path);
  std::string line, last;
  bool empty = true;
  if (in) {
    if (std::getline(in, line)) {
      empty = false;
      if (line != kHeader) {
        *why = path + " is not a loom swarm status CSV: its first line is '" + line.substr(0, 80) + "', not '" +
               kHeader + "' (give a new file, or one this command wrote)";
        return false;
      }
      while (std::getline(in, line))
        if (!line.empty()) last = line;
    }
  }
  if (!last.empty()) {
    char *end = nullptr;
    const long long e = std::strtoll(last.c_str(), &end, 10);
    if (end == last.c_str() || *end != ',' || e < 0) {
      *why = path + ": its last row '" + last.substr(0, 80) + "' does not start with an epoch";
      return false;
    }
    *last_epoch = e;
  }
  std::ofstream out(path, std::ios::app);
  if (!out) {
    *why = "cannot write " + path + " (check the folder exists and is writable)";
    return false;
  }
  if (empty) out << kHeader << "\n";
  out.flush();
  if (!out) {
    *why = "cannot write " + path;
    return false;
  }
  return true;
}

bool LossCsv::append(const std::vector<SwarmObserver::EpochLoss> &rows, int64_t time_ms, std::string *why) {
  if (rows.empty()) return true;
  std::ofstream out(path_, std::ios::app);
  for (const auto &r : rows)
    out << r.epoch << "," << (r.mean ? fixed(*r.mean, 6) : "nan") << "," << r.peers << "," << r.windows << ","
        << r.nonfinite << "," << time_ms << "\n";
  out.flush();
  if (!out) {
    *why = "writing " + path_ + " failed (disk full?)";
    return false;
  }
  return true;
}

std::string snapshot_json(const SwarmSnapshot &s, const std::string &run_id) {
  using nlohmann::json;
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json peers = json::array();
  for (const auto &p : s.peers) {
    json peer = {{"id", std::to_string(p.peer_id)},
                 {"epoch", p.epoch},
                 {"samples", p.samples},
                 {"samples_per_second", p.samples_per_second},
                 {"loss", number(p.last_loss)},
                 {"state", state_of(p)},
                 {"address", p.state_host + ":" + std::to_string(p.state_port)},
                 {"age_s", double(s.time_ms - p.time_ms) / 1000.0},
                 {"target_batch_size", p.target_batch_size},
                 {"model", hex64(p.fingerprint)}};
    if (p.loss_epoch >= 0)
      peer["epoch_loss"] = {{"epoch", p.loss_epoch}, {"loss", number(p.epoch_loss)}, {"windows", p.loss_windows}};
    peers.push_back(peer);
  }
  json rounds = json::array();
  for (const auto &r : s.rounds) {
    json members = json::array();
    for (uint64_t m : r.members_seen) members.push_back(std::to_string(m));
    rounds.push_back({{"epoch", r.epoch},
                      {"group", hex64(r.group)},
                      {"size", r.size},
                      {"members", members},
                      {"samples", r.samples},
                      {"round_ms", r.round_ms},
                      {"matchmaking_ms", r.matchmaking_ms}});
  }
  json swarm = {{"peers", s.peers.size()},
                {"epoch", s.epoch},
                {"samples", s.samples},
                {"target_batch_size", s.target_batch_size},
                {"samples_per_second", s.samples_per_second},
                {"eta_s", s.eta_s ? json(*s.eta_s) : json(nullptr)},
                {"loss", s.mean_loss ? json(*s.mean_loss) : json(nullptr)},
                {"nonfinite_losses", s.nonfinite_losses},
                {"models", s.models}};
  json out = {{"run_id", run_id}, {"time_ms", s.time_ms}, {"swarm", swarm}, {"peers", peers}, {"rounds", rounds}};
  return out.dump();
}

std::string snapshot_text(const SwarmSnapshot &s, const std::string &run_id) {
  std::ostringstream out;
  out << "run '" << run_id << "': ";
  if (s.peers.empty()) {
    out << "no live peer seen\n";
    return out.str();
  }
  out << s.peers.size() << (s.peers.size() == 1 ? " peer" : " peers") << ", epoch " << s.epoch << ", " << s.samples
      << "/" << s.target_batch_size << " samples, " << fixed(s.samples_per_second, 1) << " samples/s";
  if (s.eta_s) out << ", next epoch in ~" << fixed(*s.eta_s, 1) << " s";
  if (s.mean_loss) out << ", loss " << loss_text(*s.mean_loss);
  out << "\n";
  if (s.nonfinite_losses > 0)
    out << "  " << s.nonfinite_losses << " peer(s) report a loss that is not finite (diverged)\n";
  if (s.models > 1)
    out << "  " << s.models << " different models train under this run_id: their peers never average together\n";
  char row[256];
  std::snprintf(row, sizeof row, "  %-20s %7s %9s %10s %10s %-10s %-21s %s\n", "PEER", "EPOCH", "SAMPLES", "SAMPLES/S",
                "LOSS", "STATE", "ADDRESS", "SEEN");
  out << row;
  for (const auto &p : s.peers) {
    const std::string address = p.state_host + ":" + std::to_string(p.state_port);
    std::snprintf(row, sizeof row, "  %-20llu %7lld %9llu %10.1f %10s %-10s %-21s %.1f s ago\n",
                  static_cast<unsigned long long>(p.peer_id), static_cast<long long>(p.epoch),
                  static_cast<unsigned long long>(p.samples), p.samples_per_second, loss_text(p.last_loss).c_str(),
                  state_of(p).c_str(), address.c_str(), double(s.time_ms - p.time_ms) / 1000.0);
    out << row;
  }
  if (!s.rounds.empty()) out << "  recent rounds:\n";
  for (const auto &r : s.rounds) {
    out << "    epoch " << r.epoch << ": " << r.size << (r.size == 1 ? " member" : " members") << " (" << r.members_seen.size()
        << " reported), " << r.samples << " samples, round " << fixed(r.round_ms, 1) << " ms, matchmaking "
        << fixed(r.matchmaking_ms, 1) << " ms\n";
  }
  return out.str();
}

}  // namespace loom_collab
