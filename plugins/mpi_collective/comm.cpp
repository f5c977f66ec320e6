// SPDX-License-Identifier: Apache-2.0
// comm_create / comm_destroy / comm_abort. MPI bootstraps itself through
// mpirun, so the out-of-band exchange is not needed and a communicator is
// always a duplicate of MPI_COMM_WORLD.
#include "comm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "backoff.h"
#include "error.h"
#include "instance.h"
#include "request.h"

namespace loom_mpi {
namespace {

// Waits for MPI_Comm_idup: the non-blocking form lets comm_create honour its
// timeout when some rank never joins.
loom_status wait_idup(const loom_collective_ctx &ctx, MPI_Request *req, int64_t timeout_ms, const char *name) {
  const auto deadline = deadline_after(timeout_ms);
  Backoff backoff(ctx.spin_us);
  for (;;) {
    int done = 0, rc;
    {
      MpiCallLock lock;
      rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Comm_idup");
    }
    if (done) return LOOM_OK;
    const auto now = Clock::now();
    if (now >= deadline)
      // A pending collective cannot be cancelled in MPI: the request is left to MPI.
      return fail(LOOM_ERR_TIMEOUT,
                  "comm_create \"%s\" timed out after %lld ms: not every rank of MPI_COMM_WORLD joined "
                  "MPI_Comm_idup",
                  name, static_cast<long long>(timeout_ms));
    backoff.pause(now);
  }
}

loom_status create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **out) {
  if (!ctx || !config || !out)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create: ctx, config and comm must not be NULL");
  // Read what the host filled in; oob and the CUDA fields are not needed.
  loom_comm_config_v1 cfg;
  std::memset(&cfg, 0, sizeof cfg);
  std::memcpy(&cfg, config, std::min<size_t>(config->struct_size, sizeof cfg));
  if (config->struct_size < offsetof(loom_comm_config_v1, timeout_ms) + sizeof cfg.timeout_ms)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create: config struct_size %u is too small", config->struct_size);
  const char *label = cfg.name && cfg.name[0] ? cfg.name : "mpi";
  if (cfg.device_type != LOOM_DEVICE_CPU)
    return fail(LOOM_ERR_UNSUPPORTED,
                "comm_create \"%s\": the mpi plugin handles host memory only (device_type %d, "
                "LOOM_DEVICE_CPU is %d)",
                label, cfg.device_type, LOOM_DEVICE_CPU);
  int world_size = 0, world_rank = 0;
  {
    MpiLock lock(g_mpi_mutex);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  }
  if (cfg.size != world_size)
    return fail(LOOM_ERR_UNAVAILABLE,
                "comm_create \"%s\": asked for %d ranks but MPI_COMM_WORLD has %d; the mpi "
                "plugin builds only world-sized communicators (start the job with mpirun -np %d)",
                label, cfg.size, world_size, cfg.size);
  if (cfg.rank != world_rank)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_create \"%s\": config rank %d is not this process's MPI rank %d",
                label, cfg.rank, world_rank);

  auto comm = std::make_unique<loom_comm>();
  comm->ctx = ctx;
  comm->rank = world_rank;
  comm->size = world_size;
  comm->timeout_ms = cfg.timeout_ms > 0 ? cfg.timeout_ms : ctx->default_timeout_ms;
  comm->blocking = ctx->blocking;
  std::snprintf(comm->name, sizeof comm->name, "%s", label);
  MPI_Request req = MPI_REQUEST_NULL;
  {
    MpiLock lock(g_mpi_mutex);
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm->mpi, &req);
    if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Comm_idup");
  }
  if (loom_status s = wait_idup(*ctx, &req, comm->timeout_ms, comm->name); s != LOOM_OK) {
    // MPI may still write the new handle into comm->mpi when the dup
    // completes later, so that memory is leaked rather than freed.
    (void)comm.release();
    return s;
  }
  {
    MpiLock lock(g_mpi_mutex);
    // Inherited from MPI_COMM_WORLD already; set again in case the host changed it.
    int rc = MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
      fail_mpi(rc, "MPI_Comm_set_errhandler");
      MPI_Comm_free(&comm->mpi);
      return LOOM_ERR_SYSTEM;
    }
    MPI_Comm_set_name(comm->mpi, comm->name);
  }
  ctx->live_comms.fetch_add(1);
  host_log(ctx, LOOM_LOG_DEBUG, "communicator \"%s\": rank %d of %d, timeout %lld ms", comm->name, comm->rank,
           comm->size, static_cast<long long>(comm->timeout_ms));
  *out = comm.release();
  return LOOM_OK;
}

}  // namespace

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) noexcept {
  if (comm) *comm = nullptr;
  return guarded([&]() -> loom_status { return create(ctx, config, comm); });
}

loom_status comm_destroy(loom_comm *comm) noexcept {
  return guarded([&]() -> loom_status {
    if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_destroy: comm is NULL");
    if (int64_t n = comm->live_requests.load())
      return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_destroy \"%s\": %lld request(s) not freed yet", comm->name,
                  static_cast<long long>(n));
    loom_status s = LOOM_OK;
    if (!comm->abandoned.load()) {
      // MPI_Comm_free is local in Open MPI: it never waits for peers.
      MpiLock lock(g_mpi_mutex);
      int rc = MPI_Comm_free(&comm->mpi);
      if (rc != MPI_SUCCESS) s = fail_mpi(rc, "MPI_Comm_free");
    }
    comm->ctx->live_comms.fetch_sub(1);
    delete comm->spare;
    delete comm;
    return s;
  });
}

loom_status comm_abort(loom_comm *comm) noexcept {
  return guarded([&]() -> loom_status {
    if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "comm_abort: comm is NULL");
    // Waiters poll this flag; MPI itself is not told (Open MPI 4.1 cannot
    // revoke a communicator), so the flag is the whole abort.
    if (!comm->aborted.exchange(true)) host_log(comm->ctx, LOOM_LOG_WARN, "communicator \"%s\" aborted", comm->name);
    return LOOM_OK;
  });
}

}  // namespace loom_mpi
