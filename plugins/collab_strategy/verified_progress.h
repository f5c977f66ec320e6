/* SPDX-License-Identifier: Apache-2.0 */
// Progress records already decoded and verified, kept by their exact bytes.
// A peer reads the same records in table after table (at 64 peers each read
// of a peer's table brings 64 records, most of them unchanged since the
// last), and checking their Ed25519 signatures again took a sixth of the
// machine's CPU time (perf, 64 teacher peers on 2 cores, 2026-12-07). The
// same bytes verify the same way every time, so a hit is as good as the
// check; bytes that differ in anything are decoded and verified afresh.
// One thread uses it (the peer's background thread).
#ifndef LOOM_COLLAB_VERIFIED_PROGRESS_H
#define LOOM_COLLAB_VERIFIED_PROGRESS_H

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "records.h"

namespace loom_collab {

class VerifiedProgress {
 public:
  // Holds up to 2 x generation records: when the newest generation is full
  // it becomes the older one and the oldest is dropped, so a record read
  // again and again stays while the swarm's superseded ones go.
  explicit VerifiedProgress(size_t generation = 1024) : generation_(generation ? generation : 1) {}

  // decode_progress(run, ...) once per distinct bytes of one run; a record
  // refused is never kept (the next copy is checked, and refused, again).
  std::optional<ProgressRecord> decode(uint64_t run, const uint8_t *data, size_t len, std::string *why);

  uint64_t hits() const { return hits_; }
  uint64_t checks() const { return checks_; }
  size_t size() const { return newest_.size() + older_.size(); }

 private:
  size_t generation_;
  uint64_t run_ = 0;
  std::unordered_map<std::string, ProgressRecord> newest_, older_;
  uint64_t hits_ = 0, checks_ = 0;
};

}  // namespace loom_collab

#endif
