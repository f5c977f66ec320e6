/* SPDX-License-Identifier: Apache-2.0 */
// A plugin instance (loom_collective_ctx) and the process-wide MPI state it
// shares with every other instance: MPI is initialised once per process, so
// init/fini keep a count and all MPI calls go through one lock.
#ifndef LOOM_MPI_INSTANCE_H
#define LOOM_MPI_INSTANCE_H

#include <atomic>
#include <cstdint>
#include <mutex>

#include "loom/collective.h"
#include "loom/cxx/errors.hpp"

struct loom_collective_ctx {
  loom_host_v1 host;           // a copy; fields beyond the host's struct_size stay zero / -1
  int64_t default_timeout_ms;  // option timeout_ms: waits when the comm config gives none
  int64_t spin_us;             // option spin_us: how long wait polls before it yields
  bool blocking = false;        // option blocking: collectives complete inside the post
  std::atomic<int> live_comms{0};
};

namespace loom_mpi {

// Guards the plugin's process-wide state (instances, MPI's lifetime) and,
// when MPI gave less than MPI_THREAD_MULTIPLE, serialises every MPI call so
// waits on several threads never enter MPI concurrently.
extern std::mutex g_mpi_mutex;
using MpiLock = std::lock_guard<std::mutex>;
// Set at init: MPI is thread-safe on its own, so MPI calls need no lock of ours.
extern std::atomic<bool> g_mpi_thread_multiple;

// Held around MPI calls on the operation paths; free under MPI_THREAD_MULTIPLE.
class MpiCallLock {
 public:
  MpiCallLock() : held_(!g_mpi_thread_multiple.load(std::memory_order_relaxed)) {
    if (held_) g_mpi_mutex.lock();
  }
  ~MpiCallLock() {
    if (held_) g_mpi_mutex.unlock();
  }
  MpiCallLock(const MpiCallLock &) = delete;
  MpiCallLock &operator=(const MpiCallLock &) = delete;

 private:
  bool held_;
};

// Counts collectives abandoned unfinished after an abort; while any exist the
// half types and ops they may still use are never freed.
extern std::atomic<int64_t> g_leaked_requests;

// Formats one message into the host's log (dropped if the host gave no log).
using loom::cxx::host_log;

// The vtable's init, fini and last_error.
loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept;
void fini(loom_collective_ctx *ctx) noexcept;
const char *last_error(loom_collective_ctx *ctx) noexcept;

}  // namespace loom_mpi

#endif  // LOOM_MPI_INSTANCE_H
