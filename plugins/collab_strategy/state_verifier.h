/* SPDX-License-Identifier: Apache-2.0 */
// Internal to the state download (state_download.cpp and
// state_download_stripes.cpp): the check of each chunk as it arrives.
#ifndef LOOM_COLLAB_STATE_VERIFIER_H
#define LOOM_COLLAB_STATE_VERIFIER_H

#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"
#include "thread_name.h"

namespace loom_collab {

// Checks chunks on worker threads while the next chunks arrive, so a
// joiner's download is bound by the wire or by the check's speed, not by
// their sum: without a key each chunk's CRC (zlib's crc32_z does about
// 1.3 GB/s on one core here), combined in chunk order into the whole-state
// CRC; with one, each chunk is opened in place under the chunk key
// (XChaCha20-Poly1305, about 1.2 GB/s). Several workers keep up with links
// faster than one core.
class Verifier {
 public:
  // key: the chunk key and the reply header it binds chunks to (null: CRCs).
  // crcs (may be null): where each chunk's CRC (of its bytes, opened when
  // sealed) goes, at its index; the whole-state CRC then comes from those
  // (a download spread over donors, whose chunks come out of order).
  // first: the index of the first chunk pushed (CRCs fold in from there).
  Verifier(uint8_t *base, const ChunkKey *key = nullptr, const uint8_t *header = nullptr, uint32_t *crcs = nullptr,
           uint64_t first = 0)
      : base_(base),
        key_(key),
        header_(header),
        crcs_(crcs),
        max_workers_(std::max(1u, std::min(4u, std::thread::hardware_concurrency() / 2))),
        next_(first),
        total_(uint32_t(crc32_z(0, nullptr, 0))) {}
  ~Verifier() {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto &w : workers_) w.join();
  }
  // The chunk's bytes at base+off must stay put and unchanged until finish().
  // want: its CRC, or with a key its tag (ChunkKey::kTagBytes).
  void push(uint64_t index, uint64_t off, uint32_t n, const uint8_t *want) {
    {
      std::lock_guard<std::mutex> g(m_);
      Item it{index, off, n, 0, {}};
      if (key_)
        std::copy(want, want + ChunkKey::kTagBytes, it.tag.begin());
      else
        it.crc = wire::get32(want);
      queue_.push_back(it);
      ++outstanding_;
    }
    cv_.notify_all();
    if (workers_.size() < max_workers_) {
      try {
        workers_.emplace_back([this] { run(); });
      } catch (const std::system_error &) {
        if (workers_.empty()) run_inline();  // no thread at all: check it here
      }
    }
  }
  // A mismatch found so far (non-blocking).
  bool failed(std::string *why) {
    std::lock_guard<std::mutex> g(m_);
    if (bad_.empty()) return false;
    *why = bad_;
    return true;
  }
  // Waits for every pushed chunk (CPU work only, no I/O); the whole CRC or a reason.
  bool finish(uint32_t *total, std::string *why) {
    std::unique_lock<std::mutex> g(m_);
    cv_.wait(g, [&] { return outstanding_ == 0 || !bad_.empty(); });
    if (!bad_.empty()) {
      *why = bad_;
      return false;
    }
    *total = total_;
    return true;
  }

 private:
  struct Item {
    uint64_t index, off;
    uint32_t n, crc;
    ChunkKey::Tag tag;
  };
  void run_inline() {
    std::unique_lock<std::mutex> g(m_);
    while (!queue_.empty() && bad_.empty()) step(g);
  }
  void run() {
    name_this_thread("collab-verify");
    std::unique_lock<std::mutex> g(m_);
    for (;;) {
      cv_.wait(g, [&] { return quit_ || !bad_.empty() || !queue_.empty(); });
      if (quit_ || !bad_.empty()) return;
      if (!step(g)) return;
    }
  }
  // Checks the queue's first chunk (called and returns with g locked); false on a mismatch.
  bool step(std::unique_lock<std::mutex> &g) {
    Item it = queue_.front();
    queue_.pop_front();
    g.unlock();
    if (key_) {
      const bool opened = key_->open(it.index, base_ + it.off, it.n, header_, kStateReplySize, it.tag.data());
      if (opened && crcs_) crcs_[it.index] = wire::crc(base_ + it.off, it.n);
      g.lock();
      if (!opened && bad_.empty())
        bad_ = "chunk " + std::to_string(it.index) +
               " of the donor's state does not open (altered, reordered or not of this state)";
      --outstanding_;
      cv_.notify_all();
      return opened;
    }
    uint32_t c = wire::crc(base_ + it.off, it.n);
    if (crcs_) crcs_[it.index] = c;
    g.lock();
    if (c != it.crc) {
      if (bad_.empty())
        bad_ =
            "chunk " + std::to_string(it.index) + " CRC mismatch (computed " + wire::hex(c) + ", sent " + wire::hex(it.crc) + ")";
      cv_.notify_all();
      return false;
    }
    // At most one pending result per worker: fold in every one now in order.
    done_[it.index] = {c, it.n};
    while (!done_.empty() && done_.begin()->first == next_) {
      total_ = uint32_t(crc32_combine(total_, done_.begin()->second.first, z_off_t(done_.begin()->second.second)));
      done_.erase(done_.begin());
      ++next_;
      --outstanding_;
    }
    cv_.notify_all();
    return true;
  }
  uint8_t *base_;
  const ChunkKey *key_;
  const uint8_t *header_;
  uint32_t *crcs_;
  const size_t max_workers_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> done_;  // index -> (crc, length), not yet folded
  uint64_t next_ = 0;                                       // the next chunk index to fold into total_
  uint64_t outstanding_ = 0;                                // pushed, not yet folded
  bool quit_ = false;
  std::string bad_;
  uint32_t total_;
  std::vector<std::thread> workers_;  // touched only by the downloading thread
};

}  // namespace loom_collab

#endif
