/* SPDX-License-Identifier: Apache-2.0 */
// A peer's training rate: samples a second over its last few seconds of
// training, the figure every estimate that turns samples into time rests on
// (top-up shares and their time, the swarm's ETA, a record's extrapolation).
#ifndef LOOM_COLLAB_TRAINING_RATE_H
#define LOOM_COLLAB_TRAINING_RATE_H

#include <cmath>
#include <cstdint>

namespace loom_collab {

// Samples over seconds, both decayed with the time trained (memory
// `memory_seconds`), rather than a mean of each window's rate. On a loaded
// machine a peer runs a burst of quick windows and then waits for the CPU:
// groups' rates read 81 to 127 times what they trained in their top-ups
// (quartiles of 299 top-ups, median 102; 64-peer churn run 19).
class TrainingRate {
 public:
  explicit TrainingRate(double memory_seconds) : memory_(memory_seconds > 0 ? memory_seconds : 1.0) {}
  // One window: `samples` trained in `seconds` (since the previous window
  // ended; the caller leaves out time spent in rounds). seconds <= 0: ignored.
  void add(double samples, double seconds) {
    if (!(seconds > 0) || !std::isfinite(seconds) || !(samples >= 0)) return;
    const double keep = std::exp(-seconds / memory_);
    samples_ = samples_ * keep + samples;
    seconds_ = seconds_ * keep + seconds;
  }
  // Samples a second; 0 before the first window.
  double rate() const { return seconds_ > 0 ? samples_ / seconds_ : 0.0; }

 private:
  double memory_;
  double samples_ = 0, seconds_ = 0;
};

// The seconds a peer trained (windows, not rounds or waits) in the
// accumulation that began at a given epoch start: its own samples a second
// this epoch, in the weight exchange (time boxes, health.h).
class EpochTrainingTime {
 public:
  // A window of `seconds` trained in the accumulation begun at `start_ms`
  // (epoch_start_ms_); another start begins the count afresh.
  void add(double seconds, int64_t start_ms) {
    if (start_ms != start_ms_) {
      start_ms_ = start_ms;
      seconds_ = 0;
    }
    seconds_ += seconds;
  }
  // Seconds trained since start_ms; 0 when no window of it was counted.
  double since(int64_t start_ms) const { return start_ms == start_ms_ ? seconds_ : 0.0; }

 private:
  double seconds_ = 0;
  int64_t start_ms_ = -1;
};

}  // namespace loom_collab

#endif
