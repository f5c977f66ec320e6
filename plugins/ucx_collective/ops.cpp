// SPDX-License-Identifier: Apache-2.0
// Argument checks, algorithm choice and posting for every operation.
#include "ops.h"

#include <cstring>
#include <mutex>

#include "algorithms.h"
#include "error.h"
#include "instance.h"
#include "loom/cxx/checks.hpp"
#include "reduce.h"

namespace loom_ucx {
namespace {

// The checks every backend makes, in collective.h's order (loom/cxx/checks.hpp).
// Whether the communicator was aborted or failed is asked last, when posting:
// argument errors win over ABORTED (collective.h).
using loom::cxx::Layout;

loom::cxx::Member member(const loom_comm *comm) { return {comm->rank, comm->size}; }

// No inline completion here: request must be given.
loom_status begin(loom_comm *comm, loom_request **request, const char *op) {
  return loom::cxx::begin(comm, request, op, "request must not be NULL");
}

loom_status refuse_if_aborted(const loom_comm *comm, const char *op) {
  return loom::cxx::refuse_if_aborted(comm->aborted.load(std::memory_order_acquire), op, comm->name);
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
  LOOM_CXX_TRY(refuse_if_aborted(comm, a.name));
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
  LOOM_CXX_TRY(refuse_if_aborted(comm, name));
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
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, name));
    LOOM_CXX_TRY(loom::cxx::check_allreduce(name, send, recv, count, dtype, op, scale, &l));
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
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "broadcast"));
    LOOM_CXX_TRY(loom::cxx::check_broadcast(member(comm), send, recv, count, dtype, root, &l));
    Args a{kOpBroadcast, "broadcast", send, recv, count, dtype, 0, root};
    return post_collective(comm, a, request);
  });
}

loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "reduce"));
    LOOM_CXX_TRY(loom::cxx::check_reduce(member(comm), send, recv, count, dtype, op, root, &l));
    Args a{kOpReduce, "reduce", send, comm->rank == root ? recv : nullptr, count, dtype, op, root};
    return post_collective(comm, a, request);
  });
}

loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                      loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "allgather"));
    LOOM_CXX_TRY(loom::cxx::check_allgather(member(comm), send, recv, sendcount, dtype, &l));
    Args a{kOpAllgather, "allgather", send, recv, sendcount, dtype, 0, -1};
    return post_collective(comm, a, request);
  });
}

loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "reduce_scatter"));
    LOOM_CXX_TRY(loom::cxx::check_reduce_scatter(member(comm), send, recv, recvcount, dtype, op, &l));
    Args a{kOpReduceScatter, "reduce_scatter", send, recv, recvcount, dtype, op, -1};
    return post_collective(comm, a, request);
  });
}

loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                     loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "alltoall"));
    LOOM_CXX_TRY(loom::cxx::check_alltoall(member(comm), send, recv, count, dtype, &l));
    Args a{kOpAlltoall, "alltoall", send, recv, count, dtype, 0, -1};
    return post_collective(comm, a, request);
  });
}

loom_status barrier(loom_comm *comm, loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    LOOM_CXX_TRY(begin(comm, request, "barrier"));
    Args a{kOpBarrier, "barrier", nullptr, nullptr, 0, 0, 0, -1};
    return post_collective(comm, a, request);
  });
}

loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "send"));
    LOOM_CXX_TRY(loom::cxx::check_point_to_point("send", member(comm), buf, count, dtype, peer, &l));
    static const char kEmpty = 0;  // a 0-byte message still needs an address to name
    return post_p2p(comm, "send", buf ? buf : &kEmpty, nullptr, count, dtype, peer, request);
  });
}

loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept {
  return guarded([&]() -> loom_status {
    Layout l;
    LOOM_CXX_TRY(begin(comm, request, "recv"));
    LOOM_CXX_TRY(loom::cxx::check_point_to_point("recv", member(comm), buf, count, dtype, peer, &l));
    return post_p2p(comm, "recv", nullptr, buf, count, dtype, peer, request);
  });
}

}  // namespace loom_ucx
