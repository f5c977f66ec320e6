/*
 * selfonly: the smallest complete Loom collective plugin.
 *
 * Its communicators have exactly one member, so every collective is a copy
 * (a sum, min or average over one member is the value itself) and finishes
 * the moment it is posted. Built as libselfonly_collective.so, it exports one
 * symbol, loom_collective_plugin_v1; everything else is static.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/collective.h"

struct loom_collective_ctx { const loom_host_v1 *host; };
struct loom_comm { int aborted; }; /* set by comm_abort, from any thread */
struct loom_request { int unused; };

/* Every operation finishes when posted, so all requests can share this one. */
static loom_request finished;

/* last_error is per thread; every message here is a static string. */
static __thread const char *last_error_text = "no error";

static loom_status fail(loom_status status, const char *message) {
  last_error_text = message;
  return status;
}

static loom_status self_init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) {
  *ctx = calloc(1, sizeof **ctx);
  if (*ctx == NULL) {
    snprintf(why, why_len, "selfonly: out of memory");
    return LOOM_ERR_SYSTEM;
  }
  (*ctx)->host = host;
  host->log(host->host_ctx, LOOM_LOG_DEBUG, "selfonly: ready (communicators of one member)");
  return LOOM_OK;
}

static void self_fini(loom_collective_ctx *ctx) { free(ctx); }

static const char *self_last_error(loom_collective_ctx *ctx) { (void)ctx; return last_error_text; }

static loom_status self_comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) {
  (void)ctx;
  *comm = NULL;
  if (config->size != 1)
    return fail(LOOM_ERR_UNAVAILABLE, "selfonly: communicators of one member only; use another plugin for size > 1");
  if (config->device_type != LOOM_DEVICE_CPU) return fail(LOOM_ERR_UNAVAILABLE, "selfonly: host memory only");
  if (config->rank != 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: rank must be 0 in a communicator of one");
  *comm = calloc(1, sizeof **comm);
  return *comm != NULL ? LOOM_OK : fail(LOOM_ERR_SYSTEM, "selfonly: out of memory");
}

static loom_status self_comm_destroy(loom_comm *comm) { free(comm); return LOOM_OK; }

static loom_status self_comm_abort(loom_comm *comm) {
  __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELAXED);
  return LOOM_OK;
}

/* What every collective comes down to: check, copy count elements, done. */
static loom_status copy(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                        loom_request **request) {
  size_t bytes = (size_t)count * loom_dtype_size(dtype);
  *request = NULL;
  if (__atomic_load_n(&comm->aborted, __ATOMIC_RELAXED)) return fail(LOOM_ERR_ABORTED, "selfonly: aborted");
  if (loom_dtype_size(dtype) == 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: unknown dtype");
  if (root != 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: root must be 0 in a communicator of one");
  if (send != recv && bytes > 0) { /* in place (send == recv) leaves nothing to do */
    const char *s = send, *r = recv;
    if (s < r + bytes && r < s + bytes) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: send and recv overlap");
    memcpy(recv, send, bytes);
  }
  *request = &finished;
  return LOOM_OK;
}

static loom_status self_allreduce(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, loom_reduce_op op,
                                  loom_request **q) { (void)op; return copy(c, s, r, n, t, 0, q); }
static loom_status self_broadcast(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, int32_t root,
                                  loom_request **q) { return copy(c, s, r, n, t, root, q); }
static loom_status self_reduce(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, loom_reduce_op op,
                               int32_t root, loom_request **q) { (void)op; return copy(c, s, r, n, t, root, q); }
static loom_status self_allgather(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t,
                                  loom_request **q) { return copy(c, s, r, n, t, 0, q); }
static loom_status self_reduce_scatter(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t,
                                       loom_reduce_op op, loom_request **q) {
  (void)op;
  return copy(c, s, r, n, t, 0, q);
}
static loom_status self_alltoall(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t,
                                 loom_request **q) { return copy(c, s, r, n, t, 0, q); }
static loom_status self_barrier(loom_comm *c, loom_request **q) { return copy(c, NULL, NULL, 0, LOOM_DTYPE_U8, 0, q); }

/* Point to point needs a second member. */
static loom_status self_send(loom_comm *c, const void *b, uint64_t n, loom_dtype t, int32_t peer, loom_request **q) {
  (void)c, (void)b, (void)n, (void)t, (void)peer;
  *q = NULL;
  return fail(LOOM_ERR_UNSUPPORTED, "selfonly: no send/recv in a communicator of one");
}
static loom_status self_recv(loom_comm *c, void *b, uint64_t n, loom_dtype t, int32_t peer, loom_request **q) {
  return self_send(c, b, n, t, peer, q);
}

static loom_status self_test(loom_request *q, int32_t *done) { (void)q; *done = 1; return LOOM_OK; }
static loom_status self_wait(loom_request *q, int64_t timeout_ms) { (void)q, (void)timeout_ms; return LOOM_OK; }
static void self_request_free(loom_request *q) { (void)q; }

static const loom_plugin_info info = {
    .struct_size = sizeof(loom_plugin_info),
    .kind = LOOM_KIND_COLLECTIVE,
    .name = "selfonly", /* must match libselfonly_collective.so */
    .version = "0.1.0",
    .description = "Example: communicators of one member, every operation a copy",
    .capabilities = LOOM_CAP_HOST_MEMORY | LOOM_CAP_ABORT,
};

static const loom_collective_v1 vtable = {
    .struct_size = sizeof(loom_collective_v1), .abi_version = LOOM_ABI_VERSION, .info = &info,
    .init = self_init, .fini = self_fini, .last_error = self_last_error,
    .comm_create = self_comm_create, .comm_destroy = self_comm_destroy, .comm_abort = self_comm_abort,
    .allreduce = self_allreduce, .broadcast = self_broadcast, .reduce = self_reduce,
    .allgather = self_allgather, .reduce_scatter = self_reduce_scatter, .alltoall = self_alltoall,
    .barrier = self_barrier, .send = self_send, .recv = self_recv,
    .test = self_test, .wait = self_wait, .request_free = self_request_free,
};

/* The one exported symbol: accept when the host speaks ABI 1.0, else refuse. */
LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                         loom_negotiate_reply *reply) {
  if (reply->struct_size < sizeof *reply) return LOOM_ERR_INVALID_ARGUMENT; /* every v1 host's reply is this big */
  if (request->abi_min > LOOM_ABI_VERSION || request->abi_max < LOOM_ABI_VERSION) {
    reply->refusal = "selfonly speaks Loom ABI 1.0 only";
    return LOOM_ERR_UNSUPPORTED;
  }
  reply->abi_version = LOOM_ABI_VERSION;
  reply->vtable = &vtable;
  return LOOM_OK;
}
