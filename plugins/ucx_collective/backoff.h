/* SPDX-License-Identifier: Apache-2.0 */
// How a wait polls: UCX's shared-memory transports progress only inside
// ucp_worker_progress, on both sides, so a waiter keeps calling it. It spins
// first (small messages finish in a microsecond), then yields the core (so
// ranks that oversubscribe the cores run), then sleeps briefly so a long wait
// for a straggler does not burn a core. The phases count from the last time
// anything moved, not from the start of the wait: a large transfer keeps its
// waiters polling at full speed. Every pause is short, so an abort from
// another thread is seen within about 100 microseconds.
#ifndef LOOM_UCX_BACKOFF_H
#define LOOM_UCX_BACKOFF_H

#include <chrono>
#include <cstdint>
#include <thread>

namespace loom_ucx {

using Clock = std::chrono::steady_clock;

// The deadline timeout_ms from now, capped so huge timeouts cannot overflow.
inline Clock::time_point deadline_after(int64_t timeout_ms) {
  constexpr int64_t kMaxMs = int64_t(10) * 365 * 24 * 3600 * 1000;  // ten years
  return Clock::now() + std::chrono::milliseconds(timeout_ms < kMaxMs ? timeout_ms : kMaxMs);
}

class Backoff {
 public:
  Backoff(int64_t spin_us, int64_t yield_us)
      : start_(Clock::now()), spin_(std::chrono::microseconds(spin_us)),
        yield_end_(spin_ + std::chrono::microseconds(yield_us)) {}

  // Something moved at `now`: poll at full speed again.
  void reset(Clock::time_point now) { start_ = now; }

  // Pauses between two polls; now is the caller's latest clock reading.
  void pause(Clock::time_point now) const {
    const auto elapsed = now - start_;
    if (elapsed < spin_) return;
    if (elapsed < yield_end_) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(kSleep);
  }

 private:
  static constexpr std::chrono::microseconds kSleep{50};
  Clock::time_point start_;
  std::chrono::microseconds spin_;
  std::chrono::microseconds yield_end_;
};

}  // namespace loom_ucx

#endif  // LOOM_UCX_BACKOFF_H
