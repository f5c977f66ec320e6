/* SPDX-License-Identifier: Apache-2.0 */
// What observers see of a peer (records.h's version 5 fields of its
// progress record): its last window's loss, its last whole epoch's mean
// loss, and its last averaged round. The training thread notes them; the
// background thread copies them into the record it publishes.
#ifndef LOOM_COLLAB_OBSERVER_REPORT_H
#define LOOM_COLLAB_OBSERVER_REPORT_H

#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>

#include "records.h"

namespace loom_collab {

class ObserverReport {
 public:
  // Training thread, at each window of epoch: its loss, when the host gave
  // one (ABI 1.10). The first window of a later epoch closes the mean of
  // the epoch before.
  void note_loss(int64_t epoch, std::optional<double> loss);
  // Training thread: the averaged round waiting for its optimizer step;
  // published by round_done().
  ProgressRecord::Round &pending_round() { return pending_; }
  void round_done();
  // Background thread: r's loss and round fields, never of an epoch after
  // r.epoch (encode refuses such a record).
  void fill(ProgressRecord *r) const;

 private:
  mutable std::mutex m_;  // guards what fill reads
  float last_loss_ = std::numeric_limits<float>::quiet_NaN();
  int64_t loss_epoch_ = -1;
  float epoch_loss_ = std::numeric_limits<float>::quiet_NaN();
  uint32_t loss_windows_ = 0;
  ProgressRecord::Round last_round_;
  // Training thread only: the epoch whose windows' losses are summed, and
  // the round not yet published.
  int64_t summing_epoch_ = -1;
  double loss_sum_ = 0;
  uint32_t loss_count_ = 0;
  ProgressRecord::Round pending_;
};

}  // namespace loom_collab

#endif
