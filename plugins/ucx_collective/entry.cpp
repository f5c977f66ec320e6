// SPDX-License-Identifier: Apache-2.0
// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "comm.h"
#include "error.h"
#include "instance.h"
#include "loom/cxx/collective.hpp"
#include "op.h"
#include "ops.h"
#include "options.h"
#include "request.h"

namespace loom_ucx {
namespace {

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_COLLECTIVE,
    "ucx",
    "0.1.0",
    "Failure-aware collectives over UCX (UCP tag matching) for host memory; any member set, bootstrapped through "
    "the caller's out-of-band exchange.",
    // Not ASYNC_PROGRESS: operations move only inside test, wait and posts.
    LOOM_CAP_HOST_MEMORY | LOOM_CAP_DYNAMIC_GROUPS | LOOM_CAP_ABORT | LOOM_CAP_PEER_FAILURE | LOOM_CAP_SCALED_ALLREDUCE,
    kOptions,
    kNumOptions,
};

// Each failed post, test or wait also leaves its message in its communicator
// (CommErrors); every operation is here.
// comm_stats (ABI 1.11) too: the algorithms count what they send.
constexpr loom_collective_v1 kVtable = [] {
  loom_collective_v1 v = LOOM_CXX_COLLECTIVE_VTABLE(&kInfo);
  v.comm_stats = comm_stats;
  return v;
}();

}  // namespace
}  // namespace loom_ucx

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch UCX.
LOOM_CXX_COLLECTIVE_ENTRY(loom_ucx::kVtable, "ucx")
