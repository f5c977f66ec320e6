// SPDX-License-Identifier: Apache-2.0
// libdevsim_collective.so: a stand-in for a device collective (nccl) on a
// machine without a GPU, for the ddp strategy's device path
// (tests/ddp/device_sim.cpp). It declares cuda-memory only, creates
// communicators only for LOOM_DEVICE_CUDA with a stream, and refuses every
// buffer the test program does not call device memory (it asks through the
// program's exported loom_devsim_is_device), as nccl refuses host memory.
// The work itself is forwarded to the mpi collective, opened through the
// host. Not installed.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>

#include "loom/collective.h"
#include "loom/cxx/collective.hpp"

namespace {

using IsDevice = int (*)(const void *, size_t);

using loom::cxx::fail;

}  // namespace

struct loom_collective_ctx {
  const loom_host_v1 *host = nullptr;
  const loom_collective_v1 *mpi = nullptr;
  loom_collective_ctx *inner = nullptr;
  IsDevice is_device = nullptr;
};

struct loom_comm {
  loom_collective_ctx *ctx;
  loom_comm *inner;
};

namespace {

loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) {
  auto is_device = reinterpret_cast<IsDevice>(dlsym(RTLD_DEFAULT, "loom_devsim_is_device"));
  if (!is_device) {
    std::snprintf(why, why_len, "devsim runs only inside loom_ddp_device_sim (no loom_devsim_is_device)");
    return LOOM_ERR_UNAVAILABLE;
  }
  const void *vt = nullptr;
  void *inner = nullptr;
  const loom_status s = host->open_plugin(host->host_ctx, LOOM_KIND_COLLECTIVE, "mpi", &vt, &inner);
  if (s != LOOM_OK) {
    std::snprintf(why, why_len, "devsim could not open the mpi collective (%s)", loom_status_name(s));
    return LOOM_ERR_UNAVAILABLE;
  }
  *ctx = new loom_collective_ctx{host, static_cast<const loom_collective_v1 *>(vt),
                                 static_cast<loom_collective_ctx *>(inner), is_device};
  return LOOM_OK;
}

void fini(loom_collective_ctx *ctx) {
  ctx->host->close_plugin(ctx->host->host_ctx, ctx->inner);
  delete ctx;
}

const char *last_error(loom_collective_ctx *) { return loom::cxx::last_error_text(); }

loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) {
  *comm = nullptr;
  if (config->device_type != LOOM_DEVICE_CUDA)
    return fail(LOOM_ERR_UNSUPPORTED, "devsim: communicators are for CUDA memory only (device_type %d)",
                int(config->device_type));
  if (config->struct_size < sizeof(loom_comm_config_v1) || config->stream == nullptr)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "devsim: a CUDA communicator wants the host's stream");
  loom_comm_config_v1 host_config = *config;
  host_config.device_type = LOOM_DEVICE_CPU;
  host_config.device_id = 0;
  host_config.stream = nullptr;
  loom_comm *inner = nullptr;
  const loom_status s = ctx->mpi->comm_create(ctx->inner, &host_config, &inner);
  if (s != LOOM_OK) return fail(s, "devsim: mpi: %s", ctx->mpi->last_error(ctx->inner));
  *comm = new loom_comm{ctx, inner};
  return LOOM_OK;
}

loom_status comm_destroy(loom_comm *comm) {
  const loom_status s = comm->ctx->mpi->comm_destroy(comm->inner);
  delete comm;
  return s;
}

loom_status comm_abort(loom_comm *comm) { return comm->ctx->mpi->comm_abort(comm->inner); }

// LOOM_OK when both buffers (count elements; NULL for none) are device memory.
loom_status device_only(loom_comm *comm, const char *op, const void *send, uint64_t send_count, const void *recv,
                        uint64_t recv_count, loom_dtype dtype) {
  const size_t elem = loom_dtype_size(dtype);
  for (auto [p, n, which] : {std::make_tuple(send, send_count, "send"), std::make_tuple(recv, recv_count, "recv")}) {
    if (p && n && !comm->ctx->is_device(p, n * elem))
      return fail(LOOM_ERR_UNSUPPORTED, "devsim: %s: the %s buffer is host memory", op, which);
  }
  return LOOM_OK;
}

loom_status allreduce(loom_comm *c, const void *send, void *recv, uint64_t n, loom_dtype d, loom_reduce_op op,
                      loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "allreduce", send, n, recv, n, d));
  return c->ctx->mpi->allreduce(c->inner, send, recv, n, d, op, r);
}
loom_status broadcast(loom_comm *c, const void *send, void *recv, uint64_t n, loom_dtype d, int32_t root,
                      loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "broadcast", send, n, recv, n, d));
  return c->ctx->mpi->broadcast(c->inner, send, recv, n, d, root, r);
}
loom_status reduce(loom_comm *c, const void *send, void *recv, uint64_t n, loom_dtype d, loom_reduce_op op,
                   int32_t root, loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "reduce", send, n, recv, n, d));
  return c->ctx->mpi->reduce(c->inner, send, recv, n, d, op, root, r);
}
loom_status allgather(loom_comm *c, const void *send, void *recv, uint64_t n, loom_dtype d, loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "allgather", send, n, nullptr, 0, d));
  return c->ctx->mpi->allgather(c->inner, send, recv, n, d, r);
}
loom_status reduce_scatter(loom_comm *c, const void *send, void *recv, uint64_t n, loom_dtype d, loom_reduce_op op,
                           loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "reduce_scatter", nullptr, 0, recv, n, d));
  return c->ctx->mpi->reduce_scatter(c->inner, send, recv, n, d, op, r);
}
loom_status alltoall(loom_comm *c, const void *send, void *recv, uint64_t n, loom_dtype d, loom_request **r) {
  return c->ctx->mpi->alltoall(c->inner, send, recv, n, d, r);
}
loom_status barrier(loom_comm *c, loom_request **r) { return c->ctx->mpi->barrier(c->inner, r); }
loom_status send(loom_comm *c, const void *buf, uint64_t n, loom_dtype d, int32_t peer, loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "send", buf, n, nullptr, 0, d));
  return c->ctx->mpi->send(c->inner, buf, n, d, peer, r);
}
loom_status recv(loom_comm *c, void *buf, uint64_t n, loom_dtype d, int32_t peer, loom_request **r) {
  LOOM_CXX_TRY(device_only(c, "recv", nullptr, 0, buf, n, d));
  return c->ctx->mpi->recv(c->inner, buf, n, d, peer, r);
}

// Requests are the mpi plugin's own; one mpi vtable serves them all.
const loom_collective_v1 *g_mpi = nullptr;
loom_status test(loom_request *r, int32_t *done) { return g_mpi->test(r, done); }
loom_status wait(loom_request *r, int64_t timeout_ms) { return g_mpi->wait(r, timeout_ms); }
void request_free(loom_request *r) { g_mpi->request_free(r); }

loom_status init_and_remember(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) {
  const loom_status s = init(host, ctx, why, why_len);
  if (s == LOOM_OK) g_mpi = (*ctx)->mpi;
  return s;
}

const loom_plugin_info kInfo = {sizeof(loom_plugin_info), LOOM_KIND_COLLECTIVE, "devsim", "0.1.0",
                                "Test only: a CUDA-memory-only collective over mpi, for ddp's device path",
                                LOOM_CAP_CUDA_MEMORY | LOOM_CAP_ABORT, nullptr, 0};

loom_collective_v1 make_vtable() {
  loom_collective_v1 v{};
  v.struct_size = LOOM_COLLECTIVE_V1_0_SIZE;
  v.abi_version = LOOM_ABI_VERSION;
  v.info = &kInfo;
  v.init = init_and_remember;
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

const loom_collective_v1 kVtable = make_vtable();

}  // namespace

LOOM_CXX_COLLECTIVE_ENTRY(kVtable, "devsim")
