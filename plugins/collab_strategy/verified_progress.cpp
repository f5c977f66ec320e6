// SPDX-License-Identifier: Apache-2.0
#include "verified_progress.h"

#include <utility>

namespace loom_collab {

std::optional<ProgressRecord> VerifiedProgress::decode(uint64_t run, const uint8_t *data, size_t len,
                                                       std::string *why) {
  if (run != run_) {  // never a record of another run from the cache
    newest_.clear();
    older_.clear();
    run_ = run;
  }
  std::string key(reinterpret_cast<const char *>(data), len);
  if (auto it = newest_.find(key); it != newest_.end()) {
    ++hits_;
    return it->second;
  }
  if (auto it = older_.find(key); it != older_.end()) {
    ++hits_;
    ProgressRecord r = it->second;
    older_.erase(it);
    newest_.emplace(std::move(key), r);  // read again: it stays a generation longer
    return r;
  }
  ++checks_;
  auto r = decode_progress(run, data, len, why);
  if (!r) return r;
  if (newest_.size() >= generation_) {
    older_ = std::move(newest_);
    newest_.clear();
  }
  newest_.emplace(std::move(key), *r);
  return r;
}

}  // namespace loom_collab
