// SPDX-License-Identifier: Apache-2.0
// What observers see of a peer (observer_report.h).
#include "observer_report.h"

namespace loom_collab {

void ObserverReport::note_loss(int64_t epoch, std::optional<double> loss) {
  if (epoch != summing_epoch_) {
    if (loss_count_ > 0) {
      std::lock_guard<std::mutex> lock(m_);
      loss_epoch_ = summing_epoch_;
      epoch_loss_ = float(loss_sum_ / loss_count_);
      loss_windows_ = loss_count_;
    }
    summing_epoch_ = epoch;
    loss_sum_ = 0;
    loss_count_ = 0;
  }
  if (!loss) return;
  loss_sum_ += *loss;
  ++loss_count_;
  std::lock_guard<std::mutex> lock(m_);
  last_loss_ = float(*loss);
}

void ObserverReport::round_done() {
  std::lock_guard<std::mutex> lock(m_);
  last_round_ = pending_;
}

void ObserverReport::fill(ProgressRecord *r) const {
  std::lock_guard<std::mutex> lock(m_);
  r->last_loss = last_loss_;
  if (loss_epoch_ <= r->epoch) {
    r->loss_epoch = loss_epoch_;
    r->epoch_loss = epoch_loss_;
    r->loss_windows = loss_windows_;
  }
  if (last_round_.epoch <= r->epoch) r->last_round = last_round_;
}

}  // namespace loom_collab
