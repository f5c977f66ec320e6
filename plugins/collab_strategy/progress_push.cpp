// SPDX-License-Identifier: Apache-2.0
#include "progress_push.h"

#include <cstring>

#include "progress_shards.h"
#include "seal.h"

namespace loom_collab {

ProgressPush::ProgressPush(uint64_t run, const std::optional<loom_key::SwarmKey> &key) : run_(run) {
  if (key) sealer_ = std::make_unique<Sealer>(*key);
}

ProgressPush::~ProgressPush() = default;

// Bound to the run and to this use, so that a sealed push is never taken
// for a DHT value or another run's record.
Bytes ProgressPush::ad() const { return use_ad("loom progress push", run_); }

Bytes ProgressPush::wrap(const Bytes &record) const {
  if (!sealer_) return record;
  const Bytes a = ad();
  return sealer_->seal(record.data(), record.size(), a.data(), a.size());
}

void ProgressPush::receive(Bytes pushed) {
  std::lock_guard<std::mutex> g(m_);
  ++received_;
  if (queue_.size() >= kMaxQueued) {
    queue_.pop_front();
    ++overflowed_;
  }
  queue_.push_back(std::move(pushed));
}

std::vector<Bytes> ProgressPush::take() {
  std::deque<Bytes> got;
  {
    std::lock_guard<std::mutex> g(m_);
    got.swap(queue_);
  }
  std::vector<Bytes> out;
  out.reserve(got.size());
  const Bytes a = sealer_ ? ad() : Bytes{};
  uint64_t bad = 0;
  for (auto &b : got) {
    if (!sealer_) {
      out.push_back(std::move(b));
      continue;
    }
    Bytes opened;
    if (sealer_->open(b.data(), b.size(), a.data(), a.size(), &opened)) out.push_back(std::move(opened));
    else ++bad;
  }
  unopened_ += bad;
  return out;
}

std::vector<PullCandidate> pull_candidates(const std::vector<ProgressRecord> &live,
                                           const std::function<std::vector<ProgressRecord>()> &held, uint64_t me,
                                           int level, uint32_t shard, const std::map<uint64_t, int64_t> &failed,
                                           int64_t now_ms,
                                           bool *stale) {
  std::vector<PullCandidate> out;
  auto pick = [&](const std::vector<ProgressRecord> &records) {
    for (const auto &r : records) {
      if (r.peer_id == me || !serves_progress(r) || shard_of(r.peer_id, level) != shard) continue;
      const auto f = failed.find(r.peer_id);
      if (f != failed.end() && now_ms < f->second) continue;
      out.push_back({r.peer_id, r.state_host, r.state_port});
    }
  };
  pick(live);
  *stale = false;
  if (out.empty()) {
    pick(held());
    *stale = !out.empty();
  }
  return out;
}

}  // namespace loom_collab
