// SPDX-License-Identifier: Apache-2.0
// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "comm.h"
#include "error.h"
#include "instance.h"
#include "loom/collective.h"
#include "op.h"
#include "ops.h"
#include "options.h"
#include "request.h"
#include "../common/comm_errors.h"
#include "../common/negotiate.h"

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
}  // namespace loom_ucx

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch UCX.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                                    loom_negotiate_reply *reply) {
  static constexpr loom_plugin_common::Refusals kRefusals = {
      "ucx collective plugin: the negotiate request is missing or too small for ABI v1",
      "ucx collective plugin: called for a kind other than collective",
      "ucx collective plugin speaks Loom ABI " LOOM_PLUGIN_ABI_RANGE};
  return loom_plugin_common::negotiate(request, reply, LOOM_KIND_COLLECTIVE, LOOM_ABI_VERSION_MIN, &loom_ucx::kVtable,
                                kRefusals);
}
