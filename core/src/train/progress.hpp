// SPDX-License-Identifier: Apache-2.0
// What a run reports: a progress line on the console (rate and ETA) and a
// CSV file of every metric (step, elapsed_s, metric, value). No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace loom::train {

class Progress {
 public:
  // csv_path empty: no file (processes other than global zero).
  Progress(const std::string& csv_path, int64_t start_step, int64_t max_steps, bool resume);

  void record(int64_t step, const std::string& metric, double value);
  // One line: step, loss, lr, steps/s, samples/s, ETA and the strategy's status.
  std::string line(int64_t step, double loss, double lr, int64_t samples, const std::string& status);

 private:
  using Clock = std::chrono::steady_clock;
  std::ofstream csv_;
  Clock::time_point start_, last_time_;
  int64_t start_step_, max_steps_, last_step_, last_samples_ = 0;
};

}  // namespace loom::train
