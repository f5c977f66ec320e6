// SPDX-License-Identifier: Apache-2.0
// Argument checks and MPI_I* posting for every operation.
#include "ops.h"

#include <climits>
#include <cstring>

#include "../common/average.h"
#include "reduce_ops.h"
#include "request.h"

namespace loom_mpi {
namespace {

// Point-to-point messages use one tag: MPI keeps messages between two ranks
// on one communicator and tag in posting order, which is the header's rule.
constexpr int kTag = 0x100f;

// What every operation checks first. Clears *request so a failure leaves
// NULL; request == NULL asks for inline completion (see post in request.h).
// Whether the communicator was aborted is asked last, by post (request.h):
// argument errors win over ABORTED (collective.h).
loom_status begin(loom_comm *comm, loom_request **request, const char *op) {
  if (request) *request = nullptr;
  if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: comm is NULL", op);
  return LOOM_OK;
}

// Checks dtype and count (MPI counts are int; larger counts are refused, not
// split) and stores the size in bytes of count elements.
loom_status check_data(loom_dtype dtype, uint64_t count, const char *op, size_t *bytes) {
  const size_t elem = loom_dtype_size(dtype);
  if (elem == 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown dtype %u", op, dtype);
  if (count > uint64_t(INT_MAX))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: count %llu exceeds MPI's int count limit (%d); split the operation", op,
                static_cast<unsigned long long>(count), INT_MAX);
  *bytes = size_t(count) * elem;
  return LOOM_OK;
}

loom_status check_op(loom_dtype dtype, loom_reduce_op op, const char *name, MPI_Op *out) {
  *out = mpi_op(dtype, op);
  if (*out == MPI_OP_NULL) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %u", name, op);
  return LOOM_OK;
}

loom_status check_buffer(const void *buf, uint64_t count, const char *op, const char *which) {
  if (!buf && count > 0)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s is NULL but count is %llu", op, which,
                static_cast<unsigned long long>(count));
  return LOOM_OK;
}

loom_status check_rank(const loom_comm *comm, int32_t r, const char *op, const char *which) {
  if (r < 0 || r >= comm->size)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s %d is out of range [0, %d)", op, which, r, comm->size);
  return LOOM_OK;
}

// Sizes of size * count-element buffers (allgather, reduce_scatter, alltoall).
loom_status check_total(const loom_comm *comm, size_t block_bytes, const char *op, size_t *total) {
  if (__builtin_mul_overflow(block_bytes, size_t(comm->size), total))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %d blocks of %zu bytes overflow the address space", op, comm->size,
                block_bytes);
  return LOOM_OK;
}

const char *at(const void *base, size_t offset) { return static_cast<const char *>(base) + offset; }

// Whether [a, a + na) and [b, b + nb) share a byte.
bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

loom_status overlap_error(const char *op, const char *rule) {
  return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: send and recv overlap but are not in place (in place needs %s)", op,
              rule);
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
    size_t bytes;
    MPI_Op mop;
    LOOM_MPI_TRY(begin(comm, request, name));
    LOOM_MPI_TRY(check_data(dtype, count, name, &bytes));
    char refusal[128];
    if (scale && loom_plugin_common::scaled_allreduce_refused(dtype, dtype_name(dtype), *scale, refusal, sizeof refusal))
      return fail(LOOM_ERR_INVALID_ARGUMENT, "%s", refusal);
    LOOM_MPI_TRY(check_op(dtype, op, name, &mop));
    LOOM_MPI_TRY(check_buffer(send, count, name, "send"));
    LOOM_MPI_TRY(check_buffer(recv, count, name, "recv"));
    const bool in_place = send == recv;
    if (!in_place && overlaps(send, bytes, recv, bytes)) return overlap_error(name, "send == recv");
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
    size_t bytes;
    LOOM_MPI_TRY(begin(comm, request, "broadcast"));
    LOOM_MPI_TRY(check_data(dtype, count, "broadcast", &bytes));
    LOOM_MPI_TRY(check_rank(comm, root, "broadcast", "root"));
    LOOM_MPI_TRY(check_buffer(recv, count, "broadcast", "recv"));
    if (comm->rank == root) {
      LOOM_MPI_TRY(check_buffer(send, count, "broadcast", "send"));
      if (send != recv) {
        if (overlaps(send, bytes, recv, bytes)) return overlap_error("broadcast", "send == recv");
        // MPI broadcasts in place only: the root's data must start in recv.
        if (bytes) std::memcpy(recv, send, bytes);
      }
    }
    return post(comm, "broadcast", "MPI_Ibcast", Finish{}, request,
                [&](MPI_Request *r) { return MPI_Ibcast(recv, int(count), mpi_datatype(dtype), root, comm->mpi, r); },
                [&] { return MPI_Bcast(recv, int(count), mpi_datatype(dtype), root, comm->mpi); });
  });
}

loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes;
    MPI_Op mop;
    LOOM_MPI_TRY(begin(comm, request, "reduce"));
    LOOM_MPI_TRY(check_data(dtype, count, "reduce", &bytes));
    LOOM_MPI_TRY(check_op(dtype, op, "reduce", &mop));
    LOOM_MPI_TRY(check_rank(comm, root, "reduce", "root"));
    LOOM_MPI_TRY(check_buffer(send, count, "reduce", "send"));
    const bool at_root = comm->rank == root;
    const bool in_place = at_root && send == recv;
    if (at_root) {
      LOOM_MPI_TRY(check_buffer(recv, count, "reduce", "recv"));
      if (!in_place && overlaps(send, bytes, recv, bytes)) return overlap_error("reduce", "send == recv");
    }
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
    size_t bytes, total;
    LOOM_MPI_TRY(begin(comm, request, "allgather"));
    LOOM_MPI_TRY(check_data(dtype, sendcount, "allgather", &bytes));
    LOOM_MPI_TRY(check_total(comm, bytes, "allgather", &total));
    LOOM_MPI_TRY(check_buffer(send, sendcount, "allgather", "send"));
    LOOM_MPI_TRY(check_buffer(recv, sendcount, "allgather", "recv"));
    // In place, this rank's block already sits at its slot of recv, which is
    // also what MPI_IN_PLACE means for MPI_Allgather.
    const bool in_place = send == at(recv, size_t(comm->rank) * bytes);
    if (!in_place && overlaps(send, bytes, recv, total))
      return overlap_error("allgather", "send == recv + rank * sendcount");
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
    size_t bytes, total;
    MPI_Op mop;
    LOOM_MPI_TRY(begin(comm, request, "reduce_scatter"));
    LOOM_MPI_TRY(check_data(dtype, recvcount, "reduce_scatter", &bytes));
    LOOM_MPI_TRY(check_total(comm, bytes, "reduce_scatter", &total));
    LOOM_MPI_TRY(check_op(dtype, op, "reduce_scatter", &mop));
    LOOM_MPI_TRY(check_buffer(send, recvcount, "reduce_scatter", "send"));
    LOOM_MPI_TRY(check_buffer(recv, recvcount, "reduce_scatter", "recv"));
    const bool in_place = recv == at(send, size_t(comm->rank) * bytes);
    if (!in_place && overlaps(send, total, recv, bytes))
      return overlap_error("reduce_scatter", "recv == send + rank * recvcount");
    Finish f = average(op, recv, recvcount, dtype);
    if (in_place && recv != send) {
      // MPI_IN_PLACE takes the input from recvbuf and leaves the result at its
      // start; NCCL's rule puts it at this rank's block, so move it there.
      f.move_from = send;
      f.move_to = recv;
      f.move_bytes = bytes;
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
    size_t bytes, total;
    LOOM_MPI_TRY(begin(comm, request, "alltoall"));
    LOOM_MPI_TRY(check_data(dtype, count, "alltoall", &bytes));
    LOOM_MPI_TRY(check_total(comm, bytes, "alltoall", &total));
    LOOM_MPI_TRY(check_buffer(send, count, "alltoall", "send"));
    LOOM_MPI_TRY(check_buffer(recv, count, "alltoall", "recv"));
    const bool in_place = send == recv;
    if (!in_place && overlaps(send, total, recv, total)) return overlap_error("alltoall", "send == recv");
    const MPI_Datatype type = mpi_datatype(dtype);
    return post(comm, "alltoall", "MPI_Ialltoall", Finish{}, request, [&](MPI_Request *r) {
      return MPI_Ialltoall(in_place ? MPI_IN_PLACE : send, int(count), type, recv, int(count), type, comm->mpi, r);
    }, [&] { return MPI_Alltoall(in_place ? MPI_IN_PLACE : send, int(count), type, recv, int(count), type, comm->mpi); });
  });
}

loom_status barrier(loom_comm *comm, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    LOOM_MPI_TRY(begin(comm, request, "barrier"));
    return post(comm, "barrier", "MPI_Ibarrier", Finish{}, request,
                [&](MPI_Request *r) { return MPI_Ibarrier(comm->mpi, r); }, [&] { return MPI_Barrier(comm->mpi); });
  });
}

loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes;
    LOOM_MPI_TRY(begin(comm, request, "send"));
    LOOM_MPI_TRY(check_data(dtype, count, "send", &bytes));
    LOOM_MPI_TRY(check_rank(comm, peer, "send", "peer"));
    LOOM_MPI_TRY(check_buffer(buf, count, "send", "buf"));
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
    size_t bytes;
    LOOM_MPI_TRY(begin(comm, request, "recv"));
    LOOM_MPI_TRY(check_data(dtype, count, "recv", &bytes));
    LOOM_MPI_TRY(check_rank(comm, peer, "recv", "peer"));
    LOOM_MPI_TRY(check_buffer(buf, count, "recv", "buf"));
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
