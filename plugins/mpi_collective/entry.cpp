// SPDX-License-Identifier: Apache-2.0
// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "comm.h"
#include "error.h"
#include "instance.h"
#include "loom/cxx/collective.hpp"
#include "ops.h"
#include "options.h"
#include "request.h"

namespace loom_mpi {
namespace {

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_COLLECTIVE,
    "mpi",
    "0.1.0",
    "Collectives over Open MPI for host memory; jobs start under mpirun.",
    // ABORT: comm_abort unblocks local waiters. Not PEER_FAILURE: Open MPI 4.1
    // cannot detect a dead peer, which shows up as a TIMEOUT. INLINE_COMPLETION
    // (ABI 1.1): every operation accepts request == NULL; a 1.0 host ignores it.
    LOOM_CAP_HOST_MEMORY | LOOM_CAP_ABORT | LOOM_CAP_INLINE_COMPLETION | LOOM_CAP_SCALED_ALLREDUCE,
    kOptions,
    kNumOptions,
};

// Each failed post, test or wait also leaves its message in its communicator
// (CommErrors); every operation is here.
constexpr loom_collective_v1 kVtable = LOOM_CXX_COLLECTIVE_VTABLE(&kInfo);

}  // namespace
}  // namespace loom_mpi

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch MPI.
LOOM_CXX_COLLECTIVE_ENTRY(loom_mpi::kVtable, "mpi")
