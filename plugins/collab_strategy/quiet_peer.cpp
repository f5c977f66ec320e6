// SPDX-License-Identifier: Apache-2.0
// What a peer that has stayed at one epoch for a while says about itself:
// what its training thread is doing and how the swarm looks from here, so
// that a log that went quiet tells a peer training its share from one
// waiting for its group, one whose view of the swarm stands still, and one
// whose host has not come back from a micro-batch.
#include <string>
#include <thread>

#include "peer.h"

namespace loom_collab {

Doing::Doing(TrainingActivity &activity, const char *what)
    : activity_(activity.thread.load() == std::this_thread::get_id() ? &activity : nullptr),
      before_(activity.doing.load()),
      before_since_(activity.since_ms.load()) {
  if (!activity_) return;
  activity_->since_ms = wall_ms();
  activity_->doing = what;
}

Doing::~Doing() {
  if (!activity_) return;
  activity_->doing = before_;
  activity_->since_ms = before_since_;
}

void Peer::say_if_quiet(int64_t now_ms, int64_t last_read_ms) {
  const int64_t quiet_ms = int64_t(opt_.report_quiet_after * 1000);
  const int64_t since = epoch_start_ms_.load();
  if (quiet_ms <= 0 || since <= 0 || now_ms - since < quiet_ms || now_ms - quiet_said_ms_ < quiet_ms) return;
  quiet_said_ms_ = now_ms;
  auto seconds = [now_ms](int64_t ms) { return std::to_string((now_ms - ms + 500) / 1000) + " s"; };
  const SwarmView v = view();
  std::pair<size_t, int64_t> held_records;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held_records = tracker_.held(id_, now_ms);
  }
  std::string doing = activity_.doing.load();
  const int64_t doing_since = activity_.since_ms.load();
  if (doing_since > 0) doing += " (for " + seconds(doing_since) + ")";
  const uint64_t until = activity_.top_up_until.load();
  std::string held = std::to_string(samples_.load()) + " samples held";
  if (until > 0) held += ", topping up its group's short round to " + std::to_string(until);
  const int64_t backward = activity_.last_backward_ms.load();
  log(Level::info, "at epoch " + std::to_string(epoch_.load()) + " for " + seconds(since) + ": the training thread is " + doing +
         "; its last micro-batch " + (backward > 0 ? seconds(backward) + " ago" : "none yet") + "; " + held +
         "; the swarm as read " + (last_read_ms > 0 ? seconds(last_read_ms) + " ago" : "never") + ": epoch " +
         std::to_string(v.global_epoch) + ", " + std::to_string(v.samples) + " of " +
         std::to_string(opt_.target_batch_size) + " samples there, " + std::to_string(v.peers) + (v.peers == 1 ? " peer" : " peers") +
         (v.sampled ? " (sampled)" : "") + "; of " + std::to_string(held_records.first) +
         " other peers' records held, the youngest " +
         (held_records.second < 0 ? "none" : std::to_string(held_records.second) + " ms old") + " (live: " +
         std::to_string(live_ms()) + " ms)");
}

}  // namespace loom_collab
