// SPDX-License-Identifier: Apache-2.0
#include "nonfinite.hpp"

#include <spdlog/spdlog.h>

#include "loom/status.hpp"

namespace loom::train {

bool NonFinitePolicy::apply(bool finite, int64_t step) {
  if (finite) {
    in_a_row_ = 0;
    return true;
  }
  if (mode_ != "skip_step") {
    throw Error::runtime("step " + std::to_string(step) +
                         ": the loss or the gradients are not finite (inf or nan); the run stops "
                         "(trainer.on_nonfinite = \"stop\"). Lower trainer.lr, set trainer.grad_clip, or set "
                         "on_nonfinite = \"skip_step\" to drop such steps");
  }
  ++skipped_;
  if (++in_a_row_ >= kMaxSkippedInARow) {
    throw Error::runtime("step " + std::to_string(step) + ": " + std::to_string(in_a_row_) +
                         " steps in a row had a non-finite loss or gradients and were dropped "
                         "(on_nonfinite = \"skip_step\"); the model no longer trains, so the run stops");
  }
  // Logged on the first of a streak and then sparsely: a flood helps nobody.
  if (in_a_row_ == 1 || skipped_ % 100 == 0) {
    spdlog::warn("step {}: non-finite loss or gradients; the step is dropped (on_nonfinite = \"skip_step\"; {} dropped so far)",
                 step, skipped_);
  }
  return false;
}

}  // namespace loom::train
