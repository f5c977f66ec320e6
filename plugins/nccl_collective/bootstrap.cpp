// SPDX-License-Identifier: Apache-2.0
// The unique id exchange and the non-blocking NCCL init.
#include "bootstrap.h"

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "error.h"

namespace loom_nccl {
namespace {

// What each rank contributes to the out-of-band allgather: whether it is
// ready, and (rank 0 only) the id every rank will use.
struct Contribution {
  uint32_t ready;
  uint32_t reserved;
  ncclUniqueId id;
};

int64_t ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 1 ? left : 1;  // a timeout of 0 could mean "no wait" to some exchanges
}

}  // namespace

loom_status exchange_unique_id(const loom_oob_v1 &oob, int rank, int size, loom_status local, Clock::time_point deadline,
                               const char *label, ncclUniqueId *id) {
  // Keep this rank's own failure: the exchange may overwrite the message.
  const std::string local_why = local == LOOM_OK ? std::string() : last_error_text();
  Contribution mine;
  std::memset(&mine, 0, sizeof mine);
  mine.ready = local == LOOM_OK ? 1 : 0;
  std::string id_why;
  if (rank == 0 && mine.ready) {
    // Opens NCCL's bootstrap root socket (NCCL_SOCKET_IFNAME / NCCL_COMM_ID
    // choose where); the id carries its address to the other ranks.
    const ncclResult_t rc = ncclGetUniqueId(&mine.id);
    if (rc != ncclSuccess) {
      fail_nccl(rc, "ncclGetUniqueId", nullptr);
      id_why = last_error_text();
      mine.ready = 0;
    }
  }
  std::vector<Contribution> all(static_cast<size_t>(size));
  const loom_status s = oob.allgather(oob.user, &mine, sizeof mine, all.data(), ms_left(deadline));
  if (local != LOOM_OK) return fail(local, "%s", local_why.c_str());
  if (!id_why.empty()) return fail(LOOM_ERR_UNAVAILABLE, "comm_create \"%s\": %s", label, id_why.c_str());
  if (s != LOOM_OK)
    return fail(s, "comm_create \"%s\": the out-of-band exchange of NCCL's unique id failed (%s)", label,
                loom_status_name(s));
  for (int k = 0; k < size; ++k) {
    if (!all[size_t(k)].ready)
      return fail(LOOM_ERR_UNAVAILABLE,
                  "comm_create \"%s\": rank %d could not set up its CUDA device or NCCL id (its own log says why)",
                  label, k);
  }
  *id = all[0].id;
  return LOOM_OK;
}

loom_status init_nccl(const ncclUniqueId &id, int rank, int size, Clock::time_point deadline, int64_t timeout_ms,
                      const char *label, ncclComm_t *out) {
  *out = nullptr;
  // Non-blocking: init runs in NCCL's background and every later call may
  // answer ncclInProgress, so nothing here or in the operations can wait on
  // a peer without a bound, and ncclCommAbort can always step in.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
  config.commName = label;  // copied by NCCL; shows in NCCL's own logs
#endif
  ncclComm_t comm = nullptr;
  // ncclUniqueId is passed by value; NCCL does not keep the caller's copy.
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    const loom_status s = fail_nccl(rc, "ncclCommInitRankConfig", comm);
    if (comm) ncclCommAbort(comm);
    return s;
  }
  Backoff backoff;
  for (;;) {
    const ncclResult_t state = async_state(comm);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      const loom_status s = fail(async_status_of(state), "comm_create \"%s\": NCCL init of rank %d of %d failed: %s",
                                 label, rank, size, nccl_error_text(state, comm).c_str());
      ncclCommAbort(comm);
      return s;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      ncclCommAbort(comm);
      return fail(LOOM_ERR_TIMEOUT,
                  "comm_create \"%s\": NCCL init of rank %d of %d did not finish within %lld ms (did every rank call "
                  "comm_create, and can they reach each other?)",
                  label, rank, size, static_cast<long long>(timeout_ms));
    }
    backoff.pause(now);
  }
  *out = comm;
  return LOOM_OK;
}

}  // namespace loom_nccl
