// SPDX-License-Identifier: Apache-2.0
#include "progress.hpp"

#include <cstdio>

namespace loom::train {

Progress::Progress(const std::string& csv_path, int64_t start_step, int64_t max_steps, bool resume)
    : start_(Clock::now()), last_time_(start_), start_step_(start_step), max_steps_(max_steps), last_step_(start_step) {
  if (csv_path.empty()) return;
  csv_.open(csv_path, resume ? std::ios::app : std::ios::trunc);
  // A run killed before its first flush leaves no file or an empty one: resuming
  // into it still needs the header.
  csv_.seekp(0, std::ios::end);
  if (csv_.tellp() <= 0) csv_ << "step,elapsed_s,metric,value\n";
}

void Progress::record(int64_t step, const std::string& metric, double value) {
  if (!csv_.is_open()) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  char row[256];
  std::snprintf(row, sizeof row, "%lld,%.3f,%s,%.9g\n", static_cast<long long>(step), elapsed, metric.c_str(), value);
  csv_ << row;
  csv_.flush();
}

std::string Progress::line(int64_t step, double loss, double lr, int64_t samples, const std::string& status) {
  const auto now = Clock::now();
  const double dt = std::chrono::duration<double>(now - last_time_).count();
  const double steps_per_s = dt > 0 ? double(step - last_step_) / dt : 0.0;
  const double samples_per_s = dt > 0 ? double(samples - last_samples_) / dt : 0.0;
  const double total = std::chrono::duration<double>(now - start_).count();
  const double overall = total > 0 ? double(step - start_step_) / total : 0.0;
  const long eta = overall > 0 ? static_cast<long>(double(max_steps_ - step) / overall) : 0;
  last_time_ = now;
  last_step_ = step;
  last_samples_ = samples;
  char text[512];
  std::snprintf(text, sizeof text, "step %lld/%lld  loss %.4f  lr %.2e  %.1f steps/s  %.0f samples/s  ETA %ld:%02ld  | %s",
                static_cast<long long>(step), static_cast<long long>(max_steps_), loss, lr, steps_per_s, samples_per_s,
                eta / 60, eta % 60, status.c_str());
  return text;
}

}  // namespace loom::train
