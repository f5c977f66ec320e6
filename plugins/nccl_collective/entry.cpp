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

namespace loom_nccl {
namespace {

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_COLLECTIVE,
    "nccl",
    "0.1.0",
    "Collectives over NVIDIA NCCL for CUDA device memory, on the host's stream; failure-aware.",
    // CUDA memory only. ASYNC_PROGRESS: NCCL runs on the GPU and in its own
    // threads, not in test/wait. ABORT and PEER_FAILURE: non-blocking
    // communicators, ncclCommGetAsyncError and ncclCommAbort (watchdog.h).
    // Not DYNAMIC_GROUPS (no ncclCommSplit here) nor INLINE_COMPLETION.
    LOOM_CAP_CUDA_MEMORY | LOOM_CAP_ASYNC_PROGRESS | LOOM_CAP_ABORT | LOOM_CAP_PEER_FAILURE |
        LOOM_CAP_SCALED_ALLREDUCE,
    kOptions,
    kNumOptions,
};

// Each failed post, test or wait also leaves its message in its communicator
// (CommErrors); every operation is here.
constexpr loom_collective_v1 kVtable = LOOM_CXX_COLLECTIVE_VTABLE(&kInfo);

}  // namespace
}  // namespace loom_nccl

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch CUDA.
LOOM_CXX_COLLECTIVE_ENTRY(loom_nccl::kVtable, "nccl")
