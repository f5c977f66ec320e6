// SPDX-License-Identifier: Apache-2.0
// role = "checkpointer": a peer that never trains. Every checkpoint_every
// epochs it loads the swarm's state as a joiner does (from a donor, checked
// against the hashes the trainers published), keeps it on disk as the
// trainer keeps its checkpoint (checkpoint_dir/checkpoint.pt, written
// atomically; `loom train --resume` with that folder as output_dir takes
// it), and serves it to joiners. So a run survives every trainer leaving.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "peer.h"

namespace loom_collab {
namespace {

// How long one after_backward call waits for the swarm before it hands
// control back to the host (which then sees a stop request or the end).
constexpr auto kWaitPerCall = std::chrono::seconds(1);
constexpr auto kPoll = std::chrono::milliseconds(50);

// Writes data to dir/name through a temporary file, fsync and rename, so
// that a reader (or a crash) sees the old file or the new, never half.
bool write_atomically(const std::string &dir, const std::string &name, const uint8_t *data, size_t len,
                      std::string *why) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    *why = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  const std::string path = dir + "/" + name, tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = "writing " + tmp + " failed: " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += size_t(n);
  }
  // The descriptor is closed whichever step fails (a failed fsync must not
  // leak it, one per checkpoint).
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "could not finish " + path + ": " + std::strerror(synced ? errno : sync_errno);
    ::unlink(tmp.c_str());
    return false;
  }
  // The rename itself reaches the disk with the folder's entry: without this a
  // power loss could leave the old name (or none, for the first checkpoint).
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: the new file is already in place
    ::close(dir_fd);
  }
  return true;
}

}  // namespace

loom_status Peer::checkpointer_window() {
  zero_grads();  // what the host computed is never used
  // A state loaded at setup (a joiner's load) is kept at once.
  if (kept_epoch_ < 0 && epoch_.load() > state_.start_step) {
    at_sync_ = true;
    keep_checkpoint();
  }
  const auto until = Clock::now() + kWaitPerCall;
  while (Clock::now() < until && !stopping() && !finished()) {
    serve_if_wanted();
    const SwarmView v = view();
    const int64_t held = epoch_.load();
    // The first state as soon as the swarm has one ahead of this peer's;
    // then one every checkpoint_every epochs, and the last.
    const bool due = v.global_epoch > held &&
                     (kept_epoch_ < 0 || v.global_epoch >= held + opt_.checkpoint_every ||
                      (max_steps_ >= 0 && v.global_epoch >= max_steps_));
    const int64_t now = wall_ms();
    if (due && now - last_resync_try_ms_ >= 1000) {
      last_resync_try_ms_ = now;
      std::string reason;
      if (!load_state(v.global_epoch, &reason)) {
        log_limited(Level::warn, "checkpointer load",
                    "checkpointer: could not load the swarm's state of epoch " + std::to_string(v.global_epoch) +
                        " (" + reason + "); trying again");
        break;
      }
      at_sync_ = true;  // it holds, and serves, the swarm's sync point
      keep_checkpoint();
      break;
    }
    std::this_thread::sleep_for(kPoll);
  }
  return LOOM_OK;
}

void Peer::keep_checkpoint() {
  const uint8_t *data = nullptr;
  size_t len = 0;
  if (state_.snapshot(state_.user, &data, &len) != LOOM_OK) {
    log(Level::warn, "checkpointer: could not snapshot the loaded state; the previous checkpoint stays");
    return;
  }
  std::string why;
  if (!write_atomically(opt_.checkpoint_dir, "checkpoint.pt", data, len, &why)) {
    log_limited(Level::warn, "checkpointer write", "checkpointer: " + why + "; the previous checkpoint stays");
    return;
  }
  kept_epoch_ = epoch_.load();
  log(Level::info, "checkpointer: kept the swarm's state of epoch " + std::to_string(kept_epoch_) + " (" +
                       std::to_string(len) + " bytes) in " + opt_.checkpoint_dir +
                       "/checkpoint.pt; it resumes the run with trainer.output_dir = \"" + opt_.checkpoint_dir +
                       "\" and loom train --resume");
}

}  // namespace loom_collab
