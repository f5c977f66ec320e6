/* SPDX-License-Identifier: Apache-2.0 */
// The watchdog thread of a communicator (as c10d's ProcessGroupNCCL has):
// every watchdog_ms, or at once when woken, it looks for NCCL's
// asynchronous errors and for posted operations past their deadline, marks
// the communicator failed (PEER_FAILED, TIMEOUT...), and runs ncclCommAbort
// for a failed communicator, which also stops its kernels on the GPU. It
// runs until comm_destroy stops it.
#ifndef LOOM_NCCL_WATCHDOG_H
#define LOOM_NCCL_WATCHDOG_H

#include "loom/collective.h"

namespace loom_nccl {

// Starts comm's watchdog; LOOM_ERR_SYSTEM if no thread could be made.
loom_status start_watchdog(loom_comm *comm);

// Stops and joins it (it finishes an abort in progress first).
void stop_watchdog(loom_comm *comm);

// Runs ncclCommAbort on comm's NCCL communicator if it failed and was not
// aborted yet. Any thread; takes and releases comm->mu.
void abort_doomed(loom_comm *comm);

}  // namespace loom_nccl

#endif  // LOOM_NCCL_WATCHDOG_H
