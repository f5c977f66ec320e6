/* SPDX-License-Identifier: Apache-2.0 */
// A communicator: a duplicate of MPI_COMM_WORLD plus the abort flag that every
// wait on it watches.
#ifndef LOOM_MPI_COMM_H
#define LOOM_MPI_COMM_H

#include <mpi.h>

#include <atomic>
#include <cstdint>

#include "loom/collective.h"
#include "loom/cxx/errors.hpp"

struct loom_comm {
  loom_collective_ctx *ctx = nullptr;
  loom::cxx::CommError error;  // comm_last_error: the last failed call's message
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 0;
  int64_t timeout_ms = 0;  // default for waits on this communicator
  bool blocking = false;   // option blocking: collectives finish inside the post
  char name[64] = "";      // label for messages
  std::atomic<bool> aborted{false};
  std::atomic<int64_t> live_requests{0};  // posted and not yet freed
  // An MPI request was abandoned after an abort and may still reference the
  // MPI communicator, so it is never freed.
  std::atomic<bool> abandoned{false};
  // One finished request kept for the next post, so the common
  // post-wait-free cycle allocates nothing (posts and frees on one
  // communicator are serialised by the caller).
  loom_request *spare = nullptr;
};

namespace loom_mpi {

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) noexcept;
loom_status comm_destroy(loom_comm *comm) noexcept;
loom_status comm_abort(loom_comm *comm) noexcept;

}  // namespace loom_mpi

#endif  // LOOM_MPI_COMM_H
