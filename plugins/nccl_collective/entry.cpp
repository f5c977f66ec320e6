// SPDX-License-Identifier: Apache-2.0
// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "comm.h"
#include "error.h"
#include "instance.h"
#include "loom/collective.h"
#include "ops.h"
#include "options.h"
#include "request.h"
#include "../common/comm_errors.h"
#include "../common/negotiate.h"

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

// Each failed post, test or wait also leaves its message in its communicator.
using Errors = loom_plugin_common::CommErrors<last_error_text>;

constexpr loom_collective_v1 make_vtable() {
  loom_collective_v1 v{};
  v.struct_size = sizeof(loom_collective_v1);
  v.abi_version = LOOM_ABI_VERSION;
  v.info = &kInfo;
  v.init = init;
  v.fini = fini;
  v.last_error = last_error;
  v.comm_create = comm_create;
  v.comm_destroy = comm_destroy;
  v.comm_abort = comm_abort;
  v.allreduce = Errors::On<allreduce>::call;
  v.broadcast = Errors::On<broadcast>::call;
  v.reduce = Errors::On<reduce>::call;
  v.allgather = Errors::On<allgather>::call;
  v.reduce_scatter = Errors::On<reduce_scatter>::call;
  v.alltoall = Errors::On<alltoall>::call;
  v.barrier = Errors::On<barrier>::call;
  v.send = Errors::On<send>::call;
  v.recv = Errors::On<recv>::call;
  v.test = Errors::On<test>::call;
  v.wait = Errors::On<wait>::call;
  v.request_free = request_free;
  v.comm_last_error = Errors::last;  // ABI 1.7
  v.absent_ops = 0;                  // every operation is here
  v.allreduce_scaled = Errors::On<allreduce_scaled>::call;
  return v;
}

constexpr loom_collective_v1 kVtable = make_vtable();

}  // namespace
}  // namespace loom_nccl

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch CUDA.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                                    loom_negotiate_reply *reply) {
  static constexpr loom_plugin_common::Refusals kRefusals = {
      "nccl collective plugin: the negotiate request is missing or too small for ABI v1",
      "nccl collective plugin: called for a kind other than collective",
      "nccl collective plugin speaks Loom ABI " LOOM_PLUGIN_ABI_RANGE};
  return loom_plugin_common::negotiate(request, reply, LOOM_KIND_COLLECTIVE, LOOM_ABI_VERSION_MIN,
                                       &loom_nccl::kVtable, kRefusals);
}
