// SPDX-License-Identifier: Apache-2.0
// init / fini: the MPI lifetime shared by every instance in the process.
#include "instance.h"

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "error.h"
#include "loom/cxx/options.hpp"
#include "options.h"
#include "reduce_ops.h"

namespace loom_mpi {

std::mutex g_mpi_mutex;
std::atomic<bool> g_mpi_thread_multiple{false};
std::atomic<int64_t> g_leaked_requests{0};

namespace {

// Process-wide MPI state, guarded by g_mpi_mutex.
int g_instances = 0;             // live instances
bool g_owns_mpi = false;         // this plugin called MPI_Init_thread, so it finalizes
char g_finalized_why[512] = "";  // set when this plugin finalized MPI

const char *thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

// Finalizes MPI if this plugin started it and nothing of ours can still use
// it. Called with the lock held and no instance left.
void finalize_if_owned(const char *why) {
  if (!g_owns_mpi) return;
  MPI_Finalize();
  g_owns_mpi = false;
  std::snprintf(g_finalized_why, sizeof g_finalized_why, "%s", why);
}

// Brings MPI up (or checks the host's MPI) for one more instance.
loom_status start_mpi(loom_collective_ctx &c) {
  int finalized = 0, initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Finalized(&finalized);
  if (finalized) {
    // MPI cannot be initialised twice in a process.
    if (g_finalized_why[0])
      return fail(LOOM_ERR_UNAVAILABLE, "MPI was already finalized in this process (%s)", g_finalized_why);
    return fail(LOOM_ERR_UNAVAILABLE, "MPI was already finalized in this process");
  }
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Open MPI 4.1's default non-blocking allreduce for large messages is 2-3x
    // slower here than its ring (measured by bench/train_step.sh): make the
    // ring the default. A value the user set in the environment wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return fail(LOOM_ERR_UNAVAILABLE, "MPI_Init_thread failed with MPI error %d", rc);
    g_owns_mpi = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED)
    return fail(LOOM_ERR_UNAVAILABLE,
                "MPI provides %s but the mpi plugin needs at least MPI_THREAD_SERIALIZED (waits and abort may "
                "come from different threads)",
                thread_level_name(provided));
  g_mpi_thread_multiple.store(provided == MPI_THREAD_MULTIPLE);
  // Errors must come back as codes: the default handler aborts the whole job.
  int rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (c.host.world_size > size)
    return fail(LOOM_ERR_UNAVAILABLE, "WORLD_SIZE asks for %d ranks but MPI has %d: start the job with mpirun -np %d",
                c.host.world_size, size, c.host.world_size);
  if (c.host.world_size > 0 && c.host.world_size < size)
    host_log(&c, LOOM_LOG_WARN, "WORLD_SIZE is %d but MPI_COMM_WORLD has %d ranks; communicators must span all %d",
             c.host.world_size, size, size);
  if (c.host.rank >= 0 && c.host.rank != rank)
    host_log(&c, LOOM_LOG_WARN, "RANK is %d but this process is MPI rank %d; MPI's rank is used", c.host.rank, rank);
  if (g_instances == 0) {
    loom_status s = create_half_types();
    if (s != LOOM_OK) {
      free_half_types();
      return s;
    }
  }
  host_log(&c, LOOM_LOG_DEBUG, "MPI %s with %s; rank %d of %d",
           g_owns_mpi ? "initialised by the plugin" : "already initialised", thread_level_name(provided), rank, size);
  return LOOM_OK;
}

loom_status init_impl(const loom_host_v1 *host, loom_collective_ctx **out) {
  if (!host || !out) return fail(LOOM_ERR_INVALID_ARGUMENT, "init: host and ctx must not be NULL");
  auto c = std::make_unique<loom_collective_ctx>();
  c->host = loom::cxx::copy_host(*host);  // what the host filled in; the rest "unknown"
  const loom::cxx::Options options(c->host);
  LOOM_CXX_TRY(options.get_int(kOptions[kOptTimeoutMs], 1, &c->default_timeout_ms));
  LOOM_CXX_TRY(options.get_int(kOptions[kOptSpinUs], 0, &c->spin_us));
  LOOM_CXX_TRY(options.get_bool(kOptions[kOptBlocking], &c->blocking));

  MpiLock lock(g_mpi_mutex);
  loom_status s = start_mpi(*c);
  if (s != LOOM_OK) {
    // MPI cannot be re-initialised, so keeping it up would not help a retry;
    // finalizing lets mpirun (or a singleton) see a clean exit.
    if (g_instances == 0) {
      char why[400];
      std::snprintf(why, sizeof why, "an earlier init failed: %s", last_error_text());
      finalize_if_owned(why);
    }
    return s;
  }
  ++g_instances;
  *out = c.release();
  return LOOM_OK;
}

}  // namespace

loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept {
  return loom::cxx::guarded_init(ctx, why, why_len, [&] { return init_impl(host, ctx); });
}

void fini(loom_collective_ctx *ctx) noexcept {
  if (!ctx) return;
  guarded([&]() -> loom_status {
    if (int n = ctx->live_comms.load())
      host_log(ctx, LOOM_LOG_ERROR, "fini called with %d communicator(s) not destroyed; they are leaked", n);
    MpiLock lock(g_mpi_mutex);
    if (--g_instances == 0) {
      // Abandoned requests may still reference the half ops; leak them then.
      if (int64_t n = g_leaked_requests.load()) {
        host_log(ctx, LOOM_LOG_WARN, "%lld MPI request(s) of aborted communicators were never completed",
                 static_cast<long long>(n));
      } else {
        free_half_types();
      }
      finalize_if_owned("the last instance of the mpi plugin was closed");
    }
    return LOOM_OK;
  });
  delete ctx;
}

const char *last_error(loom_collective_ctx *) noexcept { return last_error_text(); }

}  // namespace loom_mpi
