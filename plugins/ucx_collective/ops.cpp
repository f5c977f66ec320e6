// SPDX-License-Identifier: Apache-2.0
// Argument checks, algorithm choice and posting for every operation.
#include "ops.h"

#include <cstring>
#include <mutex>

#include "algorithms.h"
#include "error.h"
#include "instance.h"
#include "../common/average.h"
#include "reduce.h"

namespace loom_ucx {
namespace {

// What every operation checks first. Clears *request so a failure leaves NULL.
// Whether the communicator was aborted or failed is asked last, when posting:
// argument errors win over ABORTED (collective.h).
loom_status begin(loom_comm *comm, loom_request **request, const char *op) {
  if (!request) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: request must not be NULL", op);
  *request = nullptr;
  if (!comm) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: comm is NULL", op);
  return LOOM_OK;
}

loom_status refuse_if_aborted(const loom_comm *comm, const char *op) {
  if (comm->aborted.load(std::memory_order_acquire))
    return fail(LOOM_ERR_ABORTED, "%s: communicator \"%s\" was aborted", op, comm->name);
  return LOOM_OK;
}

loom_status check_data(loom_dtype dtype, uint64_t count, const char *op, size_t *bytes) {
  const size_t elem = loom_dtype_size(dtype);
  if (elem == 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown dtype %u", op, dtype);
  if (__builtin_mul_overflow(size_t(count), elem, bytes) || count > uint64_t(SIZE_MAX))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: count %llu overflows the address space", op,
                static_cast<unsigned long long>(count));
  return LOOM_OK;
}

loom_status check_op(loom_reduce_op op, const char *name) {
  if (!known_reduce_op(op)) return fail(LOOM_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %u", name, op);
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

struct Args {
  OpKind kind;
  const char *name;
  const void *send = nullptr;
  void *recv = nullptr;
  uint64_t count = 0;
  loom_dtype dtype = 0;
  loom_reduce_op reduce_op = 0;
  int32_t root = -1;
  double scale = 1.0;  // kReduceScaledSum only
};

std::unique_ptr<Algorithm> choose(loom_request &op) {
  const loom_comm *c = op.comm;
  const Tuning &t = c->ctx->tuning;
  const uint64_t bytes = op.count * op.elem;
  if (c->size == 1 || (op.count == 0 && op.header.op != kOpBarrier)) {
    op.header.algorithm = c->size == 1 ? kAlgLocal : kAlgHeaderOnly;
    return make_local(op);
  }
  const bool big = bytes >= uint64_t(t.tree_pipeline_threshold);
  switch (op.header.op) {
    case kOpAllreduce:
      if (bytes < uint64_t(t.ring_threshold)) {
        op.header.algorithm = kAlgRecursiveDoubling;
        return make_allreduce_recursive_doubling(op);
      }
      op.header.algorithm = kAlgRing;
      op.header.chunk_bytes = uint64_t(t.chunk_bytes);
      return make_allreduce_ring(op);
    case kOpReduceScatter:
      op.header.algorithm = kAlgRing;
      op.header.chunk_bytes = uint64_t(t.chunk_bytes);
      return make_reduce_scatter_ring(op);
    case kOpAllgather:
      op.header.algorithm = kAlgRing;
      op.header.chunk_bytes = uint64_t(t.chunk_bytes);
      return make_allgather_ring(op);
    case kOpBroadcast:
    case kOpReduce:
      op.header.algorithm = big ? kAlgBinomialPipelined : kAlgBinomial;
      if (big) op.header.chunk_bytes = uint64_t(t.chunk_bytes);
      return op.header.op == kOpBroadcast ? make_broadcast_binomial(op, big) : make_reduce_binomial(op, big);
    case kOpAlltoall:
      op.header.algorithm = big ? kAlgPairwiseInPlace : kAlgPairwise;
      return make_alltoall_pairwise(op, big);
    default:
      op.header.algorithm = kAlgDissemination;
      return make_barrier_dissemination(op);
  }
}

// Builds, starts and hands out a collective. Checks the communicator's state
// under the lock: a failed one refuses new work.
loom_status post_collective(loom_comm *comm, const Args &a, loom_request **request) {
  LOOM_UCX_TRY(refuse_if_aborted(comm, a.name));
  loom_collective_ctx *ctx = comm->ctx;
  std::lock_guard<std::mutex> lock(ctx->mu);
  if (comm->failed)
    return fail(LOOM_ERR_PEER_FAILED, "%s on communicator \"%s\": %s", a.name, comm->name, comm->failed_why);
  auto op = new_op(comm, a.name, true);
  op->send = a.send;
  op->recv = a.recv;
  op->count = a.count;
  op->dtype = a.dtype;
  op->reduce_op = a.reduce_op;
  op->scale = a.scale;
  op->root = a.root;
  op->elem = loom_dtype_size(a.dtype);
  WireHeader &h = op->header;
  h.magic = kHeaderMagic;
  h.op = a.kind;
  h.dtype = uint8_t(a.dtype);
  h.reduce_op = uint8_t(a.reduce_op);
  h.count = a.count;
  h.root = a.root;
  h.seq = op->seq;
  if (a.reduce_op == kReduceScaledSum) std::memcpy(&h.scale_bits, &a.scale, sizeof h.scale_bits);
  op->alg = choose(*op);
  start_op(op.get());
  comm->live_requests.fetch_add(1, std::memory_order_relaxed);
  *request = op.release();
  return LOOM_OK;
}

loom_status post_p2p(loom_comm *comm, const char *name, const void *send, void *recv, uint64_t count,
                     loom_dtype dtype, int32_t peer, loom_request **request) {
  LOOM_UCX_TRY(refuse_if_aborted(comm, name));
  loom_collective_ctx *ctx = comm->ctx;
  std::lock_guard<std::mutex> lock(ctx->mu);
  if (comm->failed)
    return fail(LOOM_ERR_PEER_FAILED, "%s on communicator \"%s\": %s", name, comm->name, comm->failed_why);
  auto op = new_op(comm, name, false);
  op->send = send;
  op->recv = recv;
  op->count = count;
  op->dtype = dtype;
  op->elem = loom_dtype_size(dtype);
  op->header.algorithm = kAlgPointToPoint;
  op->alg = send ? make_send(*op, peer) : make_recv(*op, peer);
  start_op(op.get());
  comm->live_requests.fetch_add(1, std::memory_order_relaxed);
  *request = op.release();
  return LOOM_OK;
}

// allreduce and, with scale, allreduce_scaled (op kReduceScaledSum): the
// argument checks in order, each with its own message, then the post.
loom_status post_allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request, const double *scale) noexcept {
  const char *name = scale ? "allreduce_scaled" : "allreduce";
  return guarded([&]() -> loom_status {
    size_t bytes;
    LOOM_UCX_TRY(begin(comm, request, name));
    LOOM_UCX_TRY(check_data(dtype, count, name, &bytes));
    char refusal[128];
    if (scale && loom_plugin_common::scaled_allreduce_refused(dtype, dtype_name(dtype), *scale, refusal, sizeof refusal))
      return fail(LOOM_ERR_INVALID_ARGUMENT, "%s", refusal);
    if (!scale) LOOM_UCX_TRY(check_op(op, name));
    LOOM_UCX_TRY(check_buffer(send, count, name, "send"));
    LOOM_UCX_TRY(check_buffer(recv, count, name, "recv"));
    if (send != recv && overlaps(send, bytes, recv, bytes)) return overlap_error(name, "send == recv");
    Args a{kOpAllreduce, name, send, recv, count, dtype, op, -1, scale ? *scale : 1.0};
    return post_collective(comm, a, request);
  });
}

}  // namespace

loom_status allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                      loom_reduce_op op, loom_request **request) noexcept {
  return post_allreduce(comm, send, recv, count, dtype, op, request, nullptr);
}

loom_status allreduce_scaled(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                             double scale, loom_request **request) noexcept {
  return post_allreduce(comm, send, recv, count, dtype, kReduceScaledSum, request, &scale);
}

loom_status broadcast(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes;
    LOOM_UCX_TRY(begin(comm, request, "broadcast"));
    LOOM_UCX_TRY(check_data(dtype, count, "broadcast", &bytes));
    LOOM_UCX_TRY(check_rank(comm, root, "broadcast", "root"));
    LOOM_UCX_TRY(check_buffer(recv, count, "broadcast", "recv"));
    if (comm->rank == root) {
      LOOM_UCX_TRY(check_buffer(send, count, "broadcast", "send"));
      if (send != recv && overlaps(send, bytes, recv, bytes)) return overlap_error("broadcast", "send == recv");
    }
    Args a{kOpBroadcast, "broadcast", send, recv, count, dtype, 0, root};
    return post_collective(comm, a, request);
  });
}

loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes;
    LOOM_UCX_TRY(begin(comm, request, "reduce"));
    LOOM_UCX_TRY(check_data(dtype, count, "reduce", &bytes));
    LOOM_UCX_TRY(check_op(op, "reduce"));
    LOOM_UCX_TRY(check_rank(comm, root, "reduce", "root"));
    LOOM_UCX_TRY(check_buffer(send, count, "reduce", "send"));
    if (comm->rank == root) {
      LOOM_UCX_TRY(check_buffer(recv, count, "reduce", "recv"));
      if (send != recv && overlaps(send, bytes, recv, bytes)) return overlap_error("reduce", "send == recv");
    }
    // recv is significant at the root only; elsewhere it is never touched.
    Args a{kOpReduce, "reduce", send, comm->rank == root ? recv : nullptr, count, dtype, op, root};
    return post_collective(comm, a, request);
  });
}

loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes, total;
    LOOM_UCX_TRY(begin(comm, request, "allgather"));
    LOOM_UCX_TRY(check_data(dtype, sendcount, "allgather", &bytes));
    LOOM_UCX_TRY(check_total(comm, bytes, "allgather", &total));
    LOOM_UCX_TRY(check_buffer(send, sendcount, "allgather", "send"));
    LOOM_UCX_TRY(check_buffer(recv, sendcount, "allgather", "recv"));
    const bool in_place = send == at(recv, size_t(comm->rank) * bytes);
    if (!in_place && overlaps(send, bytes, recv, total))
      return overlap_error("allgather", "send == recv + rank * sendcount");
    Args a{kOpAllgather, "allgather", send, recv, sendcount, dtype, 0, -1};
    return post_collective(comm, a, request);
  });
}

loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes, total;
    LOOM_UCX_TRY(begin(comm, request, "reduce_scatter"));
    LOOM_UCX_TRY(check_data(dtype, recvcount, "reduce_scatter", &bytes));
    LOOM_UCX_TRY(check_total(comm, bytes, "reduce_scatter", &total));
    LOOM_UCX_TRY(check_op(op, "reduce_scatter"));
    LOOM_UCX_TRY(check_buffer(send, recvcount, "reduce_scatter", "send"));
    LOOM_UCX_TRY(check_buffer(recv, recvcount, "reduce_scatter", "recv"));
    const bool in_place = recv == at(send, size_t(comm->rank) * bytes);
    if (!in_place && overlaps(send, total, recv, bytes))
      return overlap_error("reduce_scatter", "recv == send + rank * recvcount");
    Args a{kOpReduceScatter, "reduce_scatter", send, recv, recvcount, dtype, op, -1};
    return post_collective(comm, a, request);
  });
}

loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                     loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes, total;
    LOOM_UCX_TRY(begin(comm, request, "alltoall"));
    LOOM_UCX_TRY(check_data(dtype, count, "alltoall", &bytes));
    LOOM_UCX_TRY(check_total(comm, bytes, "alltoall", &total));
    LOOM_UCX_TRY(check_buffer(send, count, "alltoall", "send"));
    LOOM_UCX_TRY(check_buffer(recv, count, "alltoall", "recv"));
    if (send != recv && overlaps(send, total, recv, total)) return overlap_error("alltoall", "send == recv");
    Args a{kOpAlltoall, "alltoall", send, recv, count, dtype, 0, -1};
    return post_collective(comm, a, request);
  });
}

loom_status barrier(loom_comm *comm, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    LOOM_UCX_TRY(begin(comm, request, "barrier"));
    Args a{kOpBarrier, "barrier", nullptr, nullptr, 0, 0, 0, -1};
    return post_collective(comm, a, request);
  });
}

loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes;
    LOOM_UCX_TRY(begin(comm, request, "send"));
    LOOM_UCX_TRY(check_data(dtype, count, "send", &bytes));
    LOOM_UCX_TRY(check_rank(comm, peer, "send", "peer"));
    LOOM_UCX_TRY(check_buffer(buf, count, "send", "buf"));
    static const char kEmpty = 0;  // a 0-byte message still needs an address to name
    return post_p2p(comm, "send", buf ? buf : &kEmpty, nullptr, count, dtype, peer, request);
  });
}

loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    size_t bytes;
    LOOM_UCX_TRY(begin(comm, request, "recv"));
    LOOM_UCX_TRY(check_data(dtype, count, "recv", &bytes));
    LOOM_UCX_TRY(check_rank(comm, peer, "recv", "peer"));
    LOOM_UCX_TRY(check_buffer(buf, count, "recv", "buf"));
    return post_p2p(comm, "recv", nullptr, buf, count, dtype, peer, request);
  });
}

}  // namespace loom_ucx
