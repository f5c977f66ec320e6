// SPDX-License-Identifier: Apache-2.0
// What the trainer does with a step whose loss or gradients are not finite
// ([trainer] on_nonfinite): "stop" ends the run with an error naming the
// step; "skip_step" drops the step (no optimizer update) and logs it, and
// still ends the run once so many steps in a row were dropped that it no
// longer trains. Internal to libloom; no LibTorch here.
#pragma once

#include <cstdint>
#include <string>

namespace loom::train {

class NonFinitePolicy {
 public:
  // Consecutive dropped steps after which skip_step gives up.
  static constexpr int64_t kMaxSkippedInARow = 25;

  explicit NonFinitePolicy(std::string mode) : mode_(std::move(mode)) {}
  // Whether step `step` (1-based) may update the parameters. Throws
  // Error::runtime when the run must end.
  bool apply(bool finite, int64_t step);
  int64_t skipped() const { return skipped_; }

 private:
  std::string mode_;
  int64_t skipped_ = 0, in_a_row_ = 0;
};

}  // namespace loom::train
