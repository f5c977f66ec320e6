// SPDX-License-Identifier: Apache-2.0
#include "progress_shards.h"

#include <algorithm>
#include <cmath>

#include "records.h"

namespace loom_collab {

namespace {
// A reader keeps its level until its estimate leaves the level's range by
// this factor; a writer covers readers whose estimate is within kWriteBand
// of its own. kWriteBand > kReadBand: a writer reaches every reader whose
// estimate differs from its own by up to kWriteBand / kReadBand (25%).
constexpr double kReadBand = 1.2;
constexpr double kWriteBand = 1.5;
}  // namespace

int shard_level(double peers, uint64_t per_shard) {
  const double ratio = peers / double(std::max<uint64_t>(1, per_shard));
  if (!(ratio >= 2)) return 0;
  return std::min(kMaxShardLevel, int(std::floor(std::log2(ratio))));
}

std::vector<int> write_levels(double peers, uint64_t per_shard) {
  std::vector<int> out;
  for (int l = shard_level(peers / kWriteBand, per_shard); l <= shard_level(peers * kWriteBand, per_shard); ++l)
    out.push_back(l);
  return out;
}

uint32_t shard_of(uint64_t peer_id, int level) {
  if (level <= 0) return 0;
  return static_cast<uint32_t>(mix64(peer_id ^ 0x70726f6772657373ull) >> (64 - level));
}

std::string progress_shard_key(const std::string &run_id, int level, uint32_t shard) {
  if (level <= 0) return progress_key(run_id);
  return progress_key(run_id) + "/" + std::to_string(level) + "/" + std::to_string(shard);
}

std::vector<uint32_t> ShardPlan::next_reads() {
  ++reads_;
  const uint32_t own = shard_of(me_, level_);
  std::vector<uint32_t> out{own};
  if (level_ == 0) return out;
  // Every other shard in turn, from a start of this peer's own: two peers
  // of one shard do not read the same other shard at the same time.
  const uint64_t shards = uint64_t(1) << level_;
  const uint32_t other = uint32_t((own + 1 + (mix64(me_) + turn_++) % (shards - 1)) % shards);
  out.push_back(other);
  return out;
}

std::vector<int> ShardPlan::next_probes() {
  std::vector<int> out;
  if (probe_now() || (level_ == 0 && last_peers_ < 2 && reads_ % kProbeEvery == 0)) {
    fell_ = false;
    for (int level = level_ + 1; level <= kMaxShardLevel; ++level) out.push_back(level);
    return out;
  }
  if (level_ != 0 || last_peers_ >= double(per_shard_) || reads_ % kProbeEvery != 0) return out;
  out.push_back(1 + int(probes_++ % kMaxShardLevel));
  return out;
}

void ShardPlan::saw(int level, uint32_t shard, uint64_t records, int64_t now_ms) {
  if (level == level_) {
    seen_[shard] = Seen{records + (shard == shard_of(me_, level) ? 1 : 0), now_ms};
    return;
  }
  if (level < level_ || records < 2 || shard != shard_of(me_, level)) return;
  const double probed = std::ldexp(double(records + 1), level);
  if (probed <= last_peers_ * kWriteBand) return;
  const int next = shard_level(probed, per_shard_);
  if (next > level_) {
    level_ = next;
    seen_.clear();
  }
  if (level_ == level) seen_[shard] = Seen{records + 1, now_ms};
  last_peers_ = probed;
}

double ShardPlan::peers(int64_t now_ms, int64_t max_age_ms) {
  double sum = 0;
  size_t n = 0;
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (now_ms - it->second.at_ms > max_age_ms) {
      it = seen_.erase(it);
      continue;
    }
    sum += double(it->second.records);
    ++n;
    ++it;
  }
  if (n == 0) return last_peers_;  // nothing read lately: the last estimate stands
  const double estimate = std::ldexp(sum / double(n), level_);
  const double low = std::ldexp(double(per_shard_), level_) / kReadBand;
  const double high = std::ldexp(2.0 * double(per_shard_), level_) * kReadBand;
  const bool below = level_ > 0 && estimate < low;
  if (!below) low_since_ms_ = -1;
  else if (low_since_ms_ < 0) low_since_ms_ = now_ms;
  if (estimate >= high || (below && now_ms - low_since_ms_ >= kFallAfterMs)) {
    const int next = shard_level(estimate, per_shard_);
    if (next != level_) {
      fell_ = fell_ || (next == 0 && level_ > 0);
      level_ = next;
      seen_.clear();
      low_since_ms_ = -1;
    }
  }
  last_peers_ = estimate;
  return estimate;
}

std::vector<int> ShardPlan::levels_to_write(double peers) const {
  if (!placed()) return {};
  std::vector<int> out = write_levels(peers, per_shard_);
  if (std::find(out.begin(), out.end(), level_) == out.end()) out.push_back(level_);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace loom_collab
