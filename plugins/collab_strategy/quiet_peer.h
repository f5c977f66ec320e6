/* SPDX-License-Identifier: Apache-2.0 */
// What the host's training thread is doing, for the line a peer that has
// stayed at one epoch for a while logs (Peer::say_if_quiet, quiet_peer.cpp):
// at 64 peers on 2 cores peers logged nothing for 40 to 90 s while the
// swarm moved 4 to 7 epochs, and their logs could not say whether they
// trained, waited for their group or stood still.
#ifndef LOOM_COLLAB_QUIET_PEER_H
#define LOOM_COLLAB_QUIET_PEER_H

#include <atomic>
#include <cstdint>
#include <thread>

namespace loom_collab {

struct TrainingActivity {
  std::atomic<const char *> doing{"training"};  // a string literal, set by a Doing for a scope
  std::atomic<int64_t> since_ms{0};
  std::atomic<int64_t> last_backward_ms{0};  // the host's last micro-batch (after_backward)
  std::atomic<uint64_t> top_up_until{0};     // samples a short round's top-up runs to (0: none)
  // The training thread (after_backward's): a Doing elsewhere (a delayed
  // round's helper, the prematch thread) says nothing.
  std::atomic<std::thread::id> thread{};
};

// Sets what the training thread does for a scope, and restores what it did.
class Doing {
 public:
  Doing(TrainingActivity &activity, const char *what);
  ~Doing();
  Doing(const Doing &) = delete;
  Doing &operator=(const Doing &) = delete;

 private:
  TrainingActivity *activity_;  // null: not on the training thread
  const char *before_;
  int64_t before_since_;
};

}  // namespace loom_collab

#endif
