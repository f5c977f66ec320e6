// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "comm.h"
#include "instance.h"
#include "loom/collective.h"
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
    LOOM_CAP_HOST_MEMORY | LOOM_CAP_ABORT | LOOM_CAP_INLINE_COMPLETION,
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

loom_status answer(loom_negotiate_reply *reply, loom_status s, uint32_t version, const void *vtable,
                   const char *refusal) {
  if (REPLY_HAS(reply, abi_version)) reply->abi_version = version;
  if (REPLY_HAS(reply, vtable)) reply->vtable = vtable;
  if (REPLY_HAS(reply, refusal)) reply->refusal = refusal;
  return s;
}

}  // namespace
}  // namespace loom_mpi

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or touch MPI.
extern "C" LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                                    loom_negotiate_reply *reply) {
  using loom_mpi::answer;
  if (!reply) return LOOM_ERR_INVALID_ARGUMENT;
  if (!request || request->struct_size < sizeof(loom_negotiate_request))
    return answer(reply, LOOM_ERR_UNSUPPORTED, 0, nullptr,
                  "mpi collective plugin: the negotiate request is missing or too small for ABI v1");
  if (request->kind != LOOM_KIND_COLLECTIVE)
    return answer(reply, LOOM_ERR_UNSUPPORTED, 0, nullptr,
                  "mpi collective plugin: called for a kind other than collective");
  // The newest version both sides speak: 1.1, or 1.0 for a 1.0 host (which
  // never passes request == NULL, so the same vtable serves it).
  const uint32_t chosen = request->abi_max < LOOM_ABI_VERSION ? request->abi_max : LOOM_ABI_VERSION;
  if (LOOM_ABI_MAJOR_OF(chosen) != LOOM_ABI_MAJOR || chosen < LOOM_ABI_VERSION_MIN || chosen < request->abi_min)
    return answer(reply, LOOM_ERR_UNSUPPORTED, 0, nullptr,
                  "mpi collective plugin speaks Loom ABI 1.0 to 1.1 (versions 0x00010000 to 0x00010001)");
  return answer(reply, LOOM_OK, chosen, &loom_mpi::kVtable, nullptr);
}
