/* SPDX-License-Identifier: Apache-2.0 */
// Bringing up the NCCL communicator: the ncclUniqueId travels through the
// caller's out-of-band allgather (called once), then every rank joins with a
// non-blocking ncclCommInitRankConfig polled up to the deadline.
#ifndef LOOM_NCCL_BOOTSTRAP_H
#define LOOM_NCCL_BOOTSTRAP_H

#include <nccl.h>

#include "backoff.h"
#include "loom/collective.h"

namespace loom_nccl {

// Exchanges this rank's readiness and, from rank 0, a fresh ncclUniqueId.
// local is the outcome of this rank's own set-up (device, stream, scratch):
// a rank that failed still takes part, so the others fail at once rather
// than at their timeout. On LOOM_OK every rank holds rank 0's id in *id.
loom_status exchange_unique_id(const loom_oob_v1 &oob, int rank, int size, loom_status local, Clock::time_point deadline,
                               const char *label, ncclUniqueId *id);

// Creates the non-blocking NCCL communicator and waits until it is ready,
// at most until deadline (it is aborted then: TIMEOUT).
loom_status init_nccl(const ncclUniqueId &id, int rank, int size, Clock::time_point deadline, int64_t timeout_ms,
                      const char *label, ncclComm_t *out);

}  // namespace loom_nccl

#endif  // LOOM_NCCL_BOOTSTRAP_H
