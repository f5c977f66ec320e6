// SPDX-License-Identifier: Apache-2.0
// Argument checks and MPI_I* posting for every operation.
#include "ops.h"

#include <climits>
#include <cstring>

#include "loom/cxx/checks.hpp"
#include "reduce_ops.h"
#include "request.h"

namespace loom_mpi {
namespace {

// Point-to-point messages use one tag: MPI keeps messages between two ranks
// on one communicator and tag in posting order, which is the header's rule.
constexpr int kTag = 0x100f;

// The checks every backend makes, in collective.h's order (loom/cxx/checks.hpp).
// begin allows request == NULL: inline completion (see post in request.h).
// Whether the communicator was aborted is asked last, by post (request.h):
// argument errors win over ABORTED (collective.h).
using loom::cxx::begin;
using loom::cxx::overlaps;
using loom::cxx::Layout;

// MPI counts are int; larger counts are refused, not split.
constexpr loom::cxx::CountLimit kCountLimit{uint64_t(INT_MAX), "MPI's int count limit"};

loom::cxx::Member member(const loom_comm *comm) { return {comm->rank, comm->size}; }

// MPI's reduction for a reduce op the checks accepted.
loom_status mpi_op_of(loom_dtype dtype, loom_reduce_op op, const char *name, MPI_Op *out) {
  *out = mpi_op(dtype, op);
  if (*out == MPI_OP_NULL) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %u", name, op);
  return LOOM_OK;
}

Finish average(loom_reduce_op op, void *buf, uint64_t count, loom_dtype dtype) {
  Finish f;
  if (op == LOOM_REDUCE_AVG) {
    f.avg_buf = buf;
    f.avg_count = count;
    f.dtype = dtype;
  }
  return f;
}

// Every allreduce but the fast path's: the checks one by one, each with its
// own message, then post (request.h). Out of line, so that its stack frame
// and saved registers are not paid on the fast path. scale non-null: an
// allreduce_scaled (MPI sums; the request's finish multiplies the result,
// MPI having no fused form, so that is one more pass over recv).
__attribute__((noinline)) loom_status allreduce_checked(loom_comm *comm, const void *send, void *recv,
                                                        uint64_t count, loom_dtype dtype, loom_reduce_op op,
                                                        loom_request **request, const double *scale = nullptr) noexcept {
  const char *name = scale ? "allreduce_scaled" : "allreduce";
  return guarded([&]() -> loom_status {
    Layout l;
    MPI_Op mop;
    LOOM_CXX_TRY(begin(comm, request, name));
    LOOM_CXX_TRY(loom::cxx::check_allreduce(name, send, recv, count, dtype, op, scale, &l, kCountLimit));
    LOOM_CXX_TRY(mpi_op_of(dtype, op, name, &mop));
    const bool in_place = l.in_place;
    Finish f = average(op, recv, count, dtype);
    if (scale) {
      f.avg_buf = recv;
      f.avg_count = count;
      f.dtype = dtype;
      f.scaled = true;
      f.scale = *scale;
    }
    return post(comm, name, "MPI_Iallreduce", f, request, [&](MPI_Request *r) {
      return MPI_Iallreduce(in_place ? MPI_IN_PLACE : send, recv, int(count), mpi_datatype(dtype), mop, comm->mpi, r);
    }, [&] {
      return MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, int(count), mpi_datatype(dtype), mop, comm->mpi);
    });
  });
}

// The fast path's MPI call, as post makes it with the blocking option. Out
// of line, like allreduce_checked: allreduce itself then needs no frame, and
// reaches either with a jump. guarded costs nothing unless something throws
// (only the mutex could).
__attribute__((noinline)) loom_status allreduce_now(const void *send, void *recv, int count, const Reduction &r,
                                                    MPI_Comm mpi) noexcept {
  return guarded([&]() -> loom_status {
    MpiCallLock lock;
    const int rc = MPI_Allreduce(send, recv, count, r.type, r.op, mpi);
    // The name post gives a failure of this call (request.h).
    return rc == MPI_SUCCESS ? LOOM_OK : fail_mpi(rc, "MPI_Iallreduce");
  });
}

}  // namespace

// The fast path is the blocking option's inline allreduce (request == NULL)
// with arguments that pass every check of allreduce_checked: it tests the
// same conditions at once, without naming which one failed, and makes the
// MPI call post would make. Anything else, errors included, goes the checked
// way, so statuses and messages are the same on both.
loom_status allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                      loom_reduce_op op, loom_request **request) noexcept {
  if (!request && comm && comm->blocking) {
    const Reduction &r = reduction(dtype, op);
    // count <= INT_MAX first: then count * r.elem cannot overflow.
    if (r.direct && count <= uint64_t(INT_MAX) && send && recv && !comm->aborted.load(std::memory_order_acquire)) {
      if (send == recv) return allreduce_now(MPI_IN_PLACE, recv, int(count), r, comm->mpi);
      if (!overlaps(send, count * r.elem, recv, count * r.elem))
        return allreduce_now(send, recv, int(count), r, comm->mpi);
    }
  }
  return allreduce_checked(comm, send, recv, count, dtype, op, request);
}

loom_status allreduce_scaled(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                             double scale, loom_request **request) noexcept {
  return allreduce_checked(comm, send, recv, count, dtype, LOOM_REDUCE_SUM, request, &scale);
}

loom_status broadcast(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "broadcast"));
    LOOM_CXX_TRY(loom::cxx::check_broadcast(member(comm), send, recv, count, dtype, root, &l, kCountLimit));
    // MPI broadcasts in place only: the root's data must start in recv.
    if (l.at_root && !l.in_place && l.bytes) std::memcpy(recv, send, l.bytes);
    return post(comm, "broadcast", "MPI_Ibcast", Finish{}, request,
                [&](MPI_Request *r) { return MPI_Ibcast(recv, int(count), mpi_datatype(dtype), root, comm->mpi, r); },
                [&] { return MPI_Bcast(recv, int(count), mpi_datatype(dtype), root, comm->mpi); });
  });
}

loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    MPI_Op mop;
    LOOM_CXX_TRY(begin(comm, request, "reduce"));
    LOOM_CXX_TRY(loom::cxx::check_reduce(member(comm), send, recv, count, dtype, op, root, &l, kCountLimit));
    LOOM_CXX_TRY(mpi_op_of(dtype, op, "reduce", &mop));
    const bool at_root = l.at_root;
    const bool in_place = l.in_place;
    // recv is significant at the root only; NULL elsewhere guarantees MPI
    // never writes there.
    void *mpi_recv = at_root ? recv : nullptr;
    const Finish f = at_root ? average(op, recv, count, dtype) : Finish{};
    return post(comm, "reduce", "MPI_Ireduce", f, request, [&](MPI_Request *r) {
      return MPI_Ireduce(in_place ? MPI_IN_PLACE : send, mpi_recv, int(count), mpi_datatype(dtype), mop, root,
                         comm->mpi, r);
    }, [&] {
      return MPI_Reduce(in_place ? MPI_IN_PLACE : send, mpi_recv, int(count), mpi_datatype(dtype), mop, root, comm->mpi);
    });
  });
}

loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "allgather"));
    LOOM_CXX_TRY(loom::cxx::check_allgather(member(comm), send, recv, sendcount, dtype, &l, kCountLimit));
    // In place, this rank's block already sits at its slot of recv, which is
    // also what MPI_IN_PLACE means for MPI_Allgather.
    const bool in_place = l.in_place;
    const MPI_Datatype type = mpi_datatype(dtype);
    return post(comm, "allgather", "MPI_Iallgather", Finish{}, request, [&](MPI_Request *r) {
      return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, int(sendcount), type, recv, int(sendcount), type, comm->mpi,
                            r);
    }, [&] {
      return MPI_Allgather(in_place ? MPI_IN_PLACE : send, int(sendcount), type, recv, int(sendcount), type, comm->mpi);
    });
  });
}

loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    MPI_Op mop;
    LOOM_CXX_TRY(begin(comm, request, "reduce_scatter"));
    LOOM_CXX_TRY(loom::cxx::check_reduce_scatter(member(comm), send, recv, recvcount, dtype, op, &l, kCountLimit));
    LOOM_CXX_TRY(mpi_op_of(dtype, op, "reduce_scatter", &mop));
    const bool in_place = l.in_place;
    Finish f = average(op, recv, recvcount, dtype);
    if (in_place && recv != send) {
      // MPI_IN_PLACE takes the input from recvbuf and leaves the result at its
      // start; NCCL's rule puts it at this rank's block, so move it there.
      f.move_from = send;
      f.move_to = recv;
      f.move_bytes = l.bytes;
    }
    // In place, the whole input is MPI's recvbuf; MPI writes only its first block.
    void *mpi_recv = in_place ? const_cast<void *>(send) : recv;
    return post(comm, "reduce_scatter", "MPI_Ireduce_scatter_block", f, request, [&](MPI_Request *r) {
      return MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, mpi_recv, int(recvcount), mpi_datatype(dtype),
                                       mop, comm->mpi, r);
    }, [&] {
      return MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, mpi_recv, int(recvcount), mpi_datatype(dtype), mop,
                                      comm->mpi);
    });
  });
}

loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                     loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "alltoall"));
    LOOM_CXX_TRY(loom::cxx::check_alltoall(member(comm), send, recv, count, dtype, &l, kCountLimit));
    const bool in_place = l.in_place;
    const MPI_Datatype type = mpi_datatype(dtype);
    return post(comm, "alltoall", "MPI_Ialltoall", Finish{}, request, [&](MPI_Request *r) {
      return MPI_Ialltoall(in_place ? MPI_IN_PLACE : send, int(count), type, recv, int(count), type, comm->mpi, r);
    }, [&] { return MPI_Alltoall(in_place ? MPI_IN_PLACE : send, int(count), type, recv, int(count), type, comm->mpi); });
  });
}

loom_status barrier(loom_comm *comm, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    LOOM_CXX_TRY(begin(comm, request, "barrier"));
    return post(comm, "barrier", "MPI_Ibarrier", Finish{}, request,
                [&](MPI_Request *r) { return MPI_Ibarrier(comm->mpi, r); }, [&] { return MPI_Barrier(comm->mpi); });
  });
}

loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "send"));
    LOOM_CXX_TRY(loom::cxx::check_point_to_point("send", member(comm), buf, count, dtype, peer, &l, kCountLimit));
    Finish f;
    f.kind = Finish::kSend;
    return post(comm, "send", "MPI_Isend", f, request, [&](MPI_Request *r) {
      return MPI_Isend(buf, int(count), mpi_datatype(dtype), peer, kTag, comm->mpi, r);
    });
  });
}

loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "recv"));
    LOOM_CXX_TRY(loom::cxx::check_point_to_point("recv", member(comm), buf, count, dtype, peer, &l, kCountLimit));
    Finish f;
    f.kind = Finish::kRecv;
    f.check_recv = true;
    f.recv_count = int(count);
    f.recv_type = mpi_datatype(dtype);
    return post(comm, "recv", "MPI_Irecv", f, request,
                [&](MPI_Request *r) { return MPI_Irecv(buf, int(count), f.recv_type, peer, kTag, comm->mpi, r); });
  });
}

}  // namespace loom_mpi
