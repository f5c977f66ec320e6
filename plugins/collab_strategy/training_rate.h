/* SPDX-License-Identifier: Apache-2.0 */
// A peer's training rate: samples a second over its last few seconds of
// training, the figure every estimate that turns samples into time rests on
// (top-up shares and their time, the swarm's ETA, a record's extrapolation).
#ifndef LOOM_COLLAB_TRAINING_RATE_H
#define LOOM_COLLAB_TRAINING_RATE_H

#include <cmath>

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

}  // namespace loom_collab

#endif
