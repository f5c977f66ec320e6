// SPDX-License-Identifier: Apache-2.0
// Progress over peers' state servers (progress_push.h): a read pulls the
// table of records a peer that writes to the key holds, pushing this
// peer's own record with it; this peer serves the records it holds the same
// way, and its goodbye goes to a few live peers as a push.
#include <algorithm>
#include <chrono>

#include "peer.h"

namespace loom_collab {

namespace {

constexpr std::chrono::milliseconds kPullTimeout{500};
constexpr int64_t kPullBackoffMs = 10000;  // a peer whose table could not be read is not asked again this long

}  // namespace

std::optional<std::vector<Bytes>> Peer::pull_progress(int level, uint32_t shard, bool *nobody) {
  const int64_t now = wall_ms();
  std::vector<PullCandidate> candidates;
  bool stale = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Held records only when no live one names a peer to ask (pull_candidates).
    candidates = pull_candidates(
        tracker_.live_records(now), [&] { return tracker_.live_records(now, Tracker::kAnyAge); }, id_, level, shard,
        reads_.pull_failed, now, &stale);
  }
  if (candidates.empty()) {
    if (nobody) *nobody = true;
    return std::nullopt;
  }
  // A counter mixed with this peer's id: each peer its own sequence.
  const auto &[peer, host, port] = candidates[mix64(id_ + 0x9e3779b97f4a7c15ull * ++reads_.pull_seed) % candidates.size()];
  std::string why;
  uint64_t bytes = 0;
  ++reads_.pulls;
  reads_.stale_pulls += stale;
  auto got = fetch_progress(host, port, run_, level, shard, kPullTimeout, &why, opt_.swarm_key, &bytes,
                            own_push_.empty() ? nullptr : &own_push_);
  if (!got) {
    ++reads_.pull_failures;
    // Not asked again for a while: a peer that died, or that others cannot
    // reach, would cost every read a timeout and a DHT read after it.
    for (auto it = reads_.pull_failed.begin(); it != reads_.pull_failed.end();)
      it = it->second <= now ? reads_.pull_failed.erase(it) : std::next(it);
    reads_.pull_failed[peer] = now + kPullBackoffMs;
    log_limited(opt_.verbose ? Level::info : Level::debug, "progress pull",
                "could not read the progress records peer " + host + ":" + std::to_string(port) + " holds (" + why +
                    "); read the DHT instead");
    return std::nullopt;
  }
  reads_.pull_bytes += bytes;
  ++tables_;
  return got;
}

std::vector<Peer::Mate> Peer::waiting_mates() const {
  std::vector<Mate> mates;
  auto add = [&](const GroupRecord &group, const GroupComm *comm) {
    if (!comm) return;
    const auto &servers = comm->servers();
    for (size_t r = 0; r < group.members.size() && r < servers.size(); ++r)
      if (group.members[r] != id_ && servers[r].second != 0 && !servers[r].first.empty())
        mates.emplace_back(group.members[r], servers[r].first, servers[r].second);
  };
  if (pending_) add(pending_->group, pending_->comm.get());
  // Read only once its thread is done with it.
  if (prematch_ && prematch_->done && prematch_->group) add(*prematch_->group, prematch_->comm.get());
  return mates;
}

namespace {
constexpr std::chrono::milliseconds kGoodbyeTimeout{300};
}  // namespace

size_t Peer::push_record(const Bytes &wrapped, const Mate &to) {
  const auto &[peer, host, port] = to;
  // The key it serves (its own shard), so that the reply is small.
  const int level = shards_ ? shards_->level() : 0;
  std::string why;
  return fetch_progress(host, port, run_, level, shard_of(peer, level), kGoodbyeTimeout, &why, opt_.swarm_key, nullptr,
                        &wrapped)
             ? 1
             : 0;
}

void Peer::push_goodbye(const Bytes &bye, const std::vector<Mate> &mates) {
  if (!push_ || mates.empty()) return;
  // They give the round up once they hear it (GroupComm::set_left). A
  // bounded group has a few members; an unbounded one of a large swarm is
  // told in part (the rest read the DHT), so that leaving stays quick.
  constexpr size_t kMatePushes = 32;
  const Bytes wrapped = push_->wrap(bye);
  size_t told = 0;
  for (size_t i = 0; i < mates.size() && i < kMatePushes; ++i) told += push_record(wrapped, mates[i]);
  detail("pushed this peer's goodbye to " + std::to_string(told) + " of the " + std::to_string(mates.size()) +
         " members of its group that may wait for it");
}

void Peer::push_goodbye(const Bytes &bye) {
  if (!push_) return;
  constexpr size_t kGoodbyePushes = 3;
  std::vector<Mate> to;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto &r : tracker_.live_records(wall_ms()))
      if (r.peer_id != id_ && serves_progress(r)) to.emplace_back(r.peer_id, r.state_host, r.state_port);
  }
  // Which few: a random start, so that leavers do not all tell the same peers.
  const size_t first = to.empty() ? 0 : size_t(mix64(id_ ^ uint64_t(wall_ms())) % to.size());
  const Bytes wrapped = push_->wrap(bye);
  size_t told = 0;
  for (size_t i = 0; i < to.size() && told < kGoodbyePushes; ++i) told += push_record(wrapped, to[(first + i) % to.size()]);
  detail("pushed this peer's goodbye to " + std::to_string(told) + " of " + std::to_string(to.size()) +
         " live peers");
}

void Peer::share_progress(int64_t now_ms) {
  if (!server_) return;
  std::vector<const decltype(reads_.raw_records)::value_type *> kept;
  for (auto it = reads_.raw_records.begin(); it != reads_.raw_records.end();) {
    // Every record the DHT would still hold (goodbyes too, so that they
    // spread): readers count them for the swarm's size (take_progress),
    // and their views keep the live ones only. Tables of live records
    // alone left a reader on a loaded machine estimating 8 of 64 peers.
    if (now_ms - it->second.first > kRecordTtlMs) {
      it = reads_.raw_records.erase(it);
      continue;
    }
    kept.push_back(&*it);
    ++it;
  }
  // Newest first: a table cut at kMaxProgressBytes keeps the freshest.
  std::sort(kept.begin(), kept.end(), [](const auto *a, const auto *b) { return a->second.first > b->second.first; });
  std::vector<std::pair<uint64_t, Bytes>> table;
  table.reserve(kept.size());
  for (const auto *e : kept) table.emplace_back(e->first, e->second.second);
  server_->publish_progress(std::move(table));
}

void Peer::take_pushed() {
  if (!push_) return;
  const std::vector<Bytes> pushed = push_->take();
  if (pushed.empty()) return;
  // Each checked as a pulled record is; a record of a key this peer does not
  // read counts only where a read's sample names it (tracker.h), so pushes
  // from other shards change no sum.
  std::vector<uint64_t> ids;
  take_progress(pushed, &ids, /*pulled=*/true);
}

}  // namespace loom_collab
