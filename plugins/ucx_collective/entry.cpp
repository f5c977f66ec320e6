// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "comm.h"
#include "instance.h"
#include "loom/collective.h"
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
    LOOM_CAP_HOST_MEMORY | LOOM_CAP_DYNAMIC_GROUPS | LOOM_CAP_ABORT | LOOM_CAP_PEER_FAILURE,
    kOptions,
    kNumOptions,
};

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
  v.allreduce = allreduce;
  v.broadcast = broadcast;
  v.reduce = reduce;
  v.allgather = allgather;
  v.reduce_scatter = reduce_scatter;
  v.alltoall = alltoall;
  v.barrier = barrier;
  v.send = send;
  v.recv = recv;
  v.test = test;
  v.wait = wait;
  v.request_free = request_free;
  return v;
}

constexpr loom_collective_v1 kVtable = make_vtable();

// Whether the host's reply struct has room for field.
#define REPLY_HAS(reply, field) ((reply)->struct_size >= offsetof(loom_negotiate_reply, field) + sizeof((reply)->field))

loom_status answer(loom_negotiate_reply *reply, loom_status s, const void *vtable, const char *refusal) {
  if (REPLY_HAS(reply, abi_version)) reply->abi_version = vtable ? LOOM_ABI_VERSION : 0;
  if (REPLY_HAS(reply, vtable)) reply->vtable = vtable;
  if (REPLY_HAS(reply, refusal)) reply->refusal = refusal;
  return s;
}

}  // namespace
}  // namespace loom_ucx

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch UCX.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                                    loom_negotiate_reply *reply) {
  using loom_ucx::answer;
  if (!reply) return LOOM_ERR_INVALID_ARGUMENT;
  if (!request || request->struct_size < sizeof(loom_negotiate_request))
    return answer(reply, LOOM_ERR_UNSUPPORTED, nullptr,
                  "ucx collective plugin: the negotiate request is missing or too small for ABI v1");
  if (request->kind != LOOM_KIND_COLLECTIVE)
    return answer(reply, LOOM_ERR_UNSUPPORTED, nullptr,
                  "ucx collective plugin: called for a kind other than collective");
  if (request->abi_min > LOOM_ABI_VERSION || request->abi_max < LOOM_ABI_VERSION)
    return answer(reply, LOOM_ERR_UNSUPPORTED, nullptr,
                  "ucx collective plugin speaks Loom ABI 1.0 only (version 0x00010000)");
  return answer(reply, LOOM_OK, &loom_ucx::kVtable, nullptr);
}
