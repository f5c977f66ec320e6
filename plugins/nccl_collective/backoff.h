/* SPDX-License-Identifier: Apache-2.0 */
// How a wait polls: NCCL progresses on the GPU and in its own threads, so a
// waiter only looks (cudaEventQuery, ncclCommGetAsyncError). It spins briefly
// (small collectives finish in microseconds), then yields, then sleeps with a
// growing pause capped at 1 ms, so a long wait costs no core and an abort
// from another thread is still seen within about a millisecond.
#ifndef LOOM_NCCL_BACKOFF_H
#define LOOM_NCCL_BACKOFF_H

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

namespace loom_nccl {

using Clock = std::chrono::steady_clock;

// The deadline timeout_ms from now, capped so huge timeouts cannot overflow.
inline Clock::time_point deadline_after(int64_t timeout_ms) {
  constexpr int64_t kMaxMs = int64_t(10) * 365 * 24 * 3600 * 1000;  // ten years
  return Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, kMaxMs));
}

class Backoff {
 public:
  Backoff() : start_(Clock::now()) {}

  // Pauses between two polls; now is the caller's latest clock reading.
  void pause(Clock::time_point now) {
    const auto elapsed = now - start_;
    if (elapsed < kSpin) return;
    if (elapsed < kSpin + kYield) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, kMaxSleep);
  }

 private:
  static constexpr std::chrono::microseconds kSpin{20};
  static constexpr std::chrono::microseconds kYield{200};
  static constexpr std::chrono::microseconds kMaxSleep{1000};
  Clock::time_point start_;
  std::chrono::microseconds sleep_{20};
};

}  // namespace loom_nccl

#endif  // LOOM_NCCL_BACKOFF_H
