/* SPDX-License-Identifier: Apache-2.0 */
// How a wait polls MPI: Open MPI progresses only inside MPI calls, so a waiter
// must keep calling MPI_Test. It spins first (small messages finish in a few
// microseconds, as close to MPI_Wait as polling gets), then yields the core,
// then sleeps briefly so a long wait for a straggler does not burn a core.
#ifndef LOOM_MPI_BACKOFF_H
#define LOOM_MPI_BACKOFF_H

#include <chrono>
#include <cstdint>
#include <thread>

namespace loom_mpi {

using Clock = std::chrono::steady_clock;

// The deadline timeout_ms from now, capped so huge timeouts cannot overflow.
inline Clock::time_point deadline_after(int64_t timeout_ms) {
  constexpr int64_t kMaxMs = int64_t(10) * 365 * 24 * 3600 * 1000;  // ten years
  return Clock::now() + std::chrono::milliseconds(timeout_ms < kMaxMs ? timeout_ms : kMaxMs);
}

class Backoff {
 public:
  explicit Backoff(int64_t spin_us) : start_(Clock::now()), spin_(std::chrono::microseconds(spin_us)) {}

  // Pauses between two polls; now is the caller's latest clock reading.
  void pause(Clock::time_point now) const {
    const auto elapsed = now - start_;
    if (elapsed < spin_) return;
    if (elapsed < spin_ + kYieldPhase) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(kSleep);
  }

 private:
  static constexpr std::chrono::milliseconds kYieldPhase{2};
  static constexpr std::chrono::microseconds kSleep{50};
  Clock::time_point start_;
  std::chrono::microseconds spin_;
};

}  // namespace loom_mpi

#endif  // LOOM_MPI_BACKOFF_H
