// SPDX-License-Identifier: Apache-2.0
// Argument checks and NCCL enqueueing for every operation.
#include "ops.h"

#include <cstdint>
#include <initializer_list>

#include "loom/cxx/checks.hpp"
#include "device.h"
#include "request.h"
#include "types.h"

namespace loom_nccl {
namespace {

// The checks every backend makes, in collective.h's order (loom/cxx/checks.hpp).
using loom::cxx::at;
using loom::cxx::Layout;

loom::cxx::Member member(const loom_comm *comm) { return {comm->rank, comm->size}; }

// Inline completion (request == NULL) is not offered: the capability bit is
// not declared.
loom_status begin(loom_comm *comm, loom_request **request, const char *op) {
  return loom::cxx::begin(comm, request, op, "request is NULL, but the nccl plugin does not offer inline completion");
}

struct Named {
  const void *ptr;
  const char *which;
};

// What every operation asks once its arguments passed (collective.h's
// order: INVALID_ARGUMENT, then ABORTED, then UNSUPPORTED): whether the
// communicator still works, then whether each buffer is on its device.
loom_status ready(loom_comm *comm, const char *op, std::initializer_list<Named> buffers) {
  if (comm->failed.load() != LOOM_OK) {
    std::lock_guard<std::mutex> lock(comm->mu);
    return refuse_post_locked(comm, op);
  }
  LOOM_CXX_TRY(use_device(comm->device));
  for (const Named &b : buffers)
    if (b.ptr) LOOM_CXX_TRY(check_device_buffer(b.ptr, comm->device, op, b.which));
  return LOOM_OK;
}

// NCCL's type and reduction for a dtype and reduce op the checks accepted.
loom_status nccl_type_of(loom_dtype dtype, const char *op, ncclDataType_t *type) {
  if (!nccl_dtype(dtype, type)) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown dtype %u", op, dtype);
  return LOOM_OK;
}

loom_status nccl_op_of(loom_reduce_op op, const char *name, ncclRedOp_t *out) {
  if (!nccl_op(op, out)) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %u", name, op);
  return LOOM_OK;
}

// An operation of 0 elements: nothing to enqueue once the communicator works.
loom_status empty_op(loom_comm *comm, const char *op, loom_request **request) {
  LOOM_CXX_TRY(ready(comm, op, {}));
  return post_done(comm, op, request);
}

// An operation whose NCCL calls need nothing after the enqueue.
template <class Enqueue>
loom_status post_simple(loom_comm *comm, const char *op, const char *nccl_call, loom_request **out,
                        Enqueue &&enqueue) {
  return post(comm, op, nccl_call, out, enqueue, [](bool) {});
}

// Fuses the sends and receives of one exchange into one NCCL group, so they
// progress together instead of each blocking the stream until matched.
// Inside the group NCCL only records the calls; the group's end reports.
template <class Calls>
ncclResult_t group(Calls &&calls) {
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess) return rc;
  const ncclResult_t inner = calls();
  rc = ncclGroupEnd();  // always, or the thread stays inside the group
  return inner != ncclSuccess && inner != ncclInProgress ? inner : rc;
}

loom_status allreduce_impl(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request, const double *scale) {
  const char *name = scale ? "allreduce_scaled" : "allreduce";
  ncclDataType_t type;
  ncclRedOp_t nop = ncclSum;
  Layout l;
  Scalar scalar{};
  LOOM_CXX_TRY(begin(comm, request, name));
  LOOM_CXX_TRY(loom::cxx::check_allreduce(name, send, recv, count, dtype, op, scale, &l));
  LOOM_CXX_TRY(nccl_type_of(dtype, name, &type));
  char why[160];
  if (scale && !scale_scalar(dtype, *scale, &scalar, why, sizeof why))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s", why);
  if (!scale) LOOM_CXX_TRY(nccl_op_of(op, name, &nop));
  if (count == 0) return empty_op(comm, name, request);
  LOOM_CXX_TRY(ready(comm, name, {{send, "send"}, {recv, "recv"}}));
  if (!scale)
    return post_simple(comm, name, "ncclAllReduce", request, [&](ncclComm_t nc) {
      return ncclAllReduce(send, recv, size_t(count), type, nop, nc, comm->stream);
    });
  // The scale rides in the op as a host scalar read at creation; the op may
  // go as soon as the collective that uses it has been enqueued.
  bool created = false;
  return post(
      comm, name, "ncclAllReduce with ncclRedOpCreatePreMulSum", request,
      [&](ncclComm_t nc) {
        ncclResult_t rc = ncclRedOpCreatePreMulSum(&nop, scalar.bytes, type, ncclScalarHostImmediate, nc);
        if (rc != ncclSuccess) return rc;
        created = true;
        return ncclAllReduce(send, recv, size_t(count), type, nop, nc, comm->stream);
      },
      [&](bool alive) {
        // A failed communicator took its ops with it.
        if (created && alive && comm->nccl) ncclRedOpDestroy(nop, comm->nccl);
      });
}

}  // namespace

loom_status allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                      loom_reduce_op op, loom_request **request) noexcept {
  return guarded([&] { return allreduce_impl(comm, send, recv, count, dtype, op, request, nullptr); });
}

loom_status allreduce_scaled(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                             double scale, loom_request **request) noexcept {
  return guarded([&] { return allreduce_impl(comm, send, recv, count, dtype, LOOM_REDUCE_SUM, request, &scale); });
}

loom_status broadcast(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    ncclDataType_t type;
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "broadcast"));
    LOOM_CXX_TRY(loom::cxx::check_broadcast(member(comm), send, recv, count, dtype, root, &l));
    LOOM_CXX_TRY(nccl_type_of(dtype, "broadcast", &type));
    if (count == 0) return empty_op(comm, "broadcast", request);
    const bool at_root = l.at_root;
    LOOM_CXX_TRY(ready(comm, "broadcast", {{at_root ? send : nullptr, "send"}, {recv, "recv"}}));
    // send is read at the root only; elsewhere NCCL gets recv, in place.
    const void *source = at_root ? send : recv;
    return post_simple(comm, "broadcast", "ncclBroadcast", request, [&](ncclComm_t nc) {
      return ncclBroadcast(source, recv, size_t(count), type, root, nc, comm->stream);
    });
  });
}

loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    ncclDataType_t type;
    ncclRedOp_t nop;
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "reduce"));
    LOOM_CXX_TRY(loom::cxx::check_reduce(member(comm), send, recv, count, dtype, op, root, &l));
    LOOM_CXX_TRY(nccl_type_of(dtype, "reduce", &type));
    LOOM_CXX_TRY(nccl_op_of(op, "reduce", &nop));
    if (count == 0) return empty_op(comm, "reduce", request);
    const bool at_root = l.at_root;
    LOOM_CXX_TRY(ready(comm, "reduce", {{send, "send"}, {at_root ? recv : nullptr, "recv"}}));
    // recv is written at the root only; NULL elsewhere, as NCCL allows.
    void *target = at_root ? recv : nullptr;
    return post_simple(comm, "reduce", "ncclReduce", request, [&](ncclComm_t nc) {
      return ncclReduce(send, target, size_t(count), type, nop, root, nc, comm->stream);
    });
  });
}

loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    ncclDataType_t type;
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "allgather"));
    LOOM_CXX_TRY(loom::cxx::check_allgather(member(comm), send, recv, sendcount, dtype, &l));
    LOOM_CXX_TRY(nccl_type_of(dtype, "allgather", &type));
    if (sendcount == 0) return empty_op(comm, "allgather", request);
    LOOM_CXX_TRY(ready(comm, "allgather", {{send, "send"}, {recv, "recv"}}));
    return post_simple(comm, "allgather", "ncclAllGather", request, [&](ncclComm_t nc) {
      return ncclAllGather(send, recv, size_t(sendcount), type, nc, comm->stream);
    });
  });
}

loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    ncclDataType_t type;
    ncclRedOp_t nop;
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "reduce_scatter"));
    LOOM_CXX_TRY(loom::cxx::check_reduce_scatter(member(comm), send, recv, recvcount, dtype, op, &l));
    LOOM_CXX_TRY(nccl_type_of(dtype, "reduce_scatter", &type));
    LOOM_CXX_TRY(nccl_op_of(op, "reduce_scatter", &nop));
    if (recvcount == 0) return empty_op(comm, "reduce_scatter", request);
    LOOM_CXX_TRY(ready(comm, "reduce_scatter", {{send, "send"}, {recv, "recv"}}));
    return post_simple(comm, "reduce_scatter", "ncclReduceScatter", request, [&](ncclComm_t nc) {
      return ncclReduceScatter(send, recv, size_t(recvcount), type, nop, nc, comm->stream);
    });
  });
}

loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                     loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    ncclDataType_t type;
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "alltoall"));
    LOOM_CXX_TRY(loom::cxx::check_alltoall(member(comm), send, recv, count, dtype, &l));
    LOOM_CXX_TRY(nccl_type_of(dtype, "alltoall", &type));
    if (count == 0) return empty_op(comm, "alltoall", request);
    const bool in_place = l.in_place;
    const size_t bytes = l.bytes, total = l.total;
    LOOM_CXX_TRY(ready(comm, "alltoall", {{send, "send"}, {recv, "recv"}}));
    // In place, block j would be received over while it is still being sent:
    // the sends read a stream-ordered copy instead, freed after them.
    const void *source = send;
    void *copy = nullptr;
    if (in_place) {
      if (!comm->pools)
        return fail(LOOM_ERR_UNSUPPORTED,
                    "alltoall: in place needs a staging copy and this device has no stream-ordered allocator; pass "
                    "separate send and recv buffers");
      LOOM_CXX_TRY(scratch_alloc(total, comm->stream, true, &copy));
      const cudaError_t e = cudaMemcpyAsync(copy, send, total, cudaMemcpyDeviceToDevice, comm->stream);
      if (e != cudaSuccess) {
        const loom_status s = fail_cuda(e, "alltoall: cudaMemcpyAsync of the in-place input");
        scratch_free(copy, comm->stream, true, true);
        return s;
      }
      source = copy;
    }
    return post(
        comm, "alltoall", "ncclGroupEnd of alltoall's ncclSend / ncclRecv", request,
        [&](ncclComm_t nc) {
          return group([&] {
            ncclResult_t first = ncclSuccess;
            for (int j = 0; j < comm->size && (first == ncclSuccess || first == ncclInProgress); ++j) {
              first = ncclSend(at(source, size_t(j) * bytes), size_t(count), type, j, nc, comm->stream);
              if (first == ncclSuccess || first == ncclInProgress)
                first = ncclRecv(const_cast<char *>(at(recv, size_t(j) * bytes)), size_t(count), type, j, nc,
                                 comm->stream);
            }
            return first;
          });
        },
        [&](bool alive) {
          if (copy && alive) scratch_free(copy, comm->stream, true, true);  // else NCCL may still enqueue a read
        });
  });
}

loom_status barrier(loom_comm *comm, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    LOOM_CXX_TRY(begin(comm, request, "barrier"));
    LOOM_CXX_TRY(ready(comm, "barrier", {}));
    // Completes only once every rank's contribution arrived: a barrier in
    // stream order, as c10d's NCCL barrier is.
    return post_simple(comm, "barrier", "ncclAllReduce (barrier)", request, [&](ncclComm_t nc) {
      return ncclAllReduce(comm->scratch, comm->scratch, 1, ncclUint32, ncclSum, nc, comm->stream);
    });
  });
}

namespace {

loom_status point_to_point(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                           loom_request **request, bool sending) {
  const char *name = sending ? "send" : "recv";
  ncclDataType_t type;
  Layout l;
  LOOM_CXX_TRY(begin(comm, request, name));
  LOOM_CXX_TRY(loom::cxx::check_point_to_point(name, member(comm), buf, count, dtype, peer, &l));
  LOOM_CXX_TRY(nccl_type_of(dtype, name, &type));
  LOOM_CXX_TRY(ready(comm, name, {{count > 0 ? buf : nullptr, "buf"}}));
  if (peer == comm->rank)
    return fail(LOOM_ERR_UNSUPPORTED,
                "%s: peer %d is this rank; NCCL matches a message to oneself only inside one group with its receive "
                "(alltoall does that)",
                name, peer);
  if (count == 0) return post_done(comm, name, request);
  return post_simple(comm, name, sending ? "ncclSend" : "ncclRecv", request, [&](ncclComm_t nc) {
    return sending ? ncclSend(buf, size_t(count), type, peer, nc, comm->stream)
                   : ncclRecv(const_cast<void *>(buf), size_t(count), type, peer, nc, comm->stream);
  });
}

}  // namespace

loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&] { return point_to_point(comm, buf, count, dtype, peer, request, true); });
}

loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&] { return point_to_point(comm, buf, count, dtype, peer, request, false); });
}

}  // namespace loom_nccl
