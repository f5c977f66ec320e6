/* SPDX-License-Identifier: Apache-2.0 */
/*
 * selfonly: the smallest complete Loom collective plugin.
 *
 * Its communicators have exactly one member, so every collective is a copy
 * (a sum, min or average over one member is the value itself) and finishes
 * the moment it is posted. A send to oneself waits for the matching receive
 * (and the other way round), so send/recv show what every backend has: a
 * request that is still pending, test and wait with a timeout, and an abort
 * that ends the wait. Built as libselfonly_collective.so, it exports one
 * symbol, loom_collective_plugin_v1; everything else is static. It passes
 * Loom's conformance suite (loom_conformance --plugin selfonly).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/collective.h"

struct loom_collective_ctx { const loom_host_v1 *host; };

/* A posted send or receive: pending until the other one is posted. */
struct loom_request {
  loom_request *next; /* in its communicator's queue of unmatched sends or receives */
  loom_comm *comm;
  const void *send;   /* a send's data */
  void *recv;         /* a receive's buffer */
  uint64_t count;
  loom_dtype dtype;
  int done;           /* the caller serialises posting, test and wait: no lock */
  loom_status status; /* once done */
};

struct loom_comm {
  int aborted;          /* set by comm_abort, from any thread (atomic access) */
  int64_t timeout_ms;   /* what LOOM_TIMEOUT_DEFAULT means */
  loom_request *sends;  /* unmatched, in posting order */
  loom_request *recvs;
};

/* Every collective finishes when posted, so all of them share this request. */
static loom_request finished = {.done = 1, .status = LOOM_OK};

/* last_error is per thread; every message here is a static string. */
static __thread const char *last_error_text = "no error";

static loom_status fail(loom_status status, const char *message) {
  last_error_text = message;
  return status;
}

static int is_aborted(loom_comm *comm) { return __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE); }

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
  if (config->timeout_ms <= 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: timeout_ms must be > 0");
  *comm = calloc(1, sizeof **comm);
  if (*comm == NULL) return fail(LOOM_ERR_SYSTEM, "selfonly: out of memory");
  (*comm)->timeout_ms = config->timeout_ms;
  return LOOM_OK;
}

static loom_status self_comm_destroy(loom_comm *comm) { free(comm); return LOOM_OK; }

static loom_status self_comm_abort(loom_comm *comm) {
  __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELEASE);
  return LOOM_OK;
}

/* The argument checks every operation makes before it posts anything. On any
 * failure nothing is posted and *request is NULL. Whether the communicator
 * was aborted is asked after all of them (posting, below): collective.h's
 * order is INVALID_ARGUMENT, then ABORTED, then UNSUPPORTED. */
static loom_status check(loom_comm *comm, int null_buffer, uint64_t count, loom_dtype dtype, loom_request **request) {
  (void)comm;
  *request = NULL;
  if (loom_dtype_size(dtype) == 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: unknown dtype");
  if (count > 0 && null_buffer) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: NULL buffer with a count above 0");
  return LOOM_OK;
}

static loom_status posting(loom_comm *comm) {
  return is_aborted(comm) ? fail(LOOM_ERR_ABORTED, "selfonly: the communicator was aborted") : LOOM_OK;
}

static int known_op(loom_reduce_op op) { return op >= LOOM_REDUCE_SUM && op <= LOOM_REDUCE_AVG; }

/* What every collective comes down to: check, copy count elements, done. */
static loom_status copy(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                        loom_request **request) {
  size_t bytes = (size_t)count * loom_dtype_size(dtype);
  loom_status s = check(comm, send == NULL || recv == NULL, count, dtype, request);
  if (s != LOOM_OK) return s;
  if (root != 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: root must be 0 in a communicator of one");
  if (send != recv && bytes > 0) { /* in place (send == recv) leaves nothing to do */
    const char *from = send, *to = recv;
    if (from < to + bytes && to < from + bytes) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: send and recv overlap");
  }
  s = posting(comm);
  if (s != LOOM_OK) return s;
  if (send != recv && bytes > 0) memcpy(recv, send, bytes);
  *request = &finished;
  return LOOM_OK;
}

static loom_status reduction(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, loom_reduce_op op,
                             int32_t root, loom_request **q) {
  if (!known_op(op)) {
    *q = NULL;
    return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: unknown reduce op");
  }
  return copy(c, s, r, n, t, root, q);
}

static loom_status self_allreduce(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, loom_reduce_op op,
                                  loom_request **q) { return reduction(c, s, r, n, t, op, 0, q); }
static loom_status self_broadcast(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, int32_t root,
                                  loom_request **q) { return copy(c, s, r, n, t, root, q); }
static loom_status self_reduce(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t, loom_reduce_op op,
                               int32_t root, loom_request **q) { return reduction(c, s, r, n, t, op, root, q); }
static loom_status self_allgather(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t,
                                  loom_request **q) { return copy(c, s, r, n, t, 0, q); }
static loom_status self_reduce_scatter(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t,
                                       loom_reduce_op op, loom_request **q) { return reduction(c, s, r, n, t, op, 0, q); }
static loom_status self_alltoall(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype t,
                                 loom_request **q) { return copy(c, s, r, n, t, 0, q); }
static loom_status self_barrier(loom_comm *c, loom_request **q) { return copy(c, NULL, NULL, 0, LOOM_DTYPE_U8, 0, q); }

/* Point to point, with oneself: a send and a receive meet in posting order. */
static void append(loom_request **queue, loom_request *q) {
  while (*queue != NULL) queue = &(*queue)->next;
  *queue = q;
}

static void unlink_request(loom_request **queue, loom_request *q) {
  for (; *queue != NULL; queue = &(*queue)->next) {
    if (*queue == q) {
      *queue = q->next;
      return;
    }
  }
}

/* Completes a send and the receive it met. */
static void match(loom_request *send, loom_request *recv) {
  loom_status s = LOOM_OK;
  if (send->count != recv->count || send->dtype != recv->dtype) {
    s = LOOM_ERR_INVALID_ARGUMENT; /* reported by test/wait on either request */
  } else if (send->count > 0) {
    memmove(recv->recv, send->send, (size_t)send->count * loom_dtype_size(send->dtype));
  }
  send->status = recv->status = s;
  send->done = recv->done = 1;
}

/* Posts a send (is_send) or a receive of buf: it meets the oldest unmatched
 * counterpart, or waits in the queue for one. */
static loom_status post_p2p(loom_comm *c, int is_send, void *buf, uint64_t n, loom_dtype t, int32_t peer,
                            loom_request **q) {
  loom_request *mine, **others;
  loom_status s = check(c, buf == NULL, n, t, q);
  if (s != LOOM_OK) return s;
  if (peer != 0) return fail(LOOM_ERR_INVALID_ARGUMENT, "selfonly: peer must be 0 in a communicator of one");
  s = posting(c);
  if (s != LOOM_OK) return s;
  mine = calloc(1, sizeof *mine);
  if (mine == NULL) return fail(LOOM_ERR_SYSTEM, "selfonly: out of memory");
  mine->comm = c;
  if (is_send) mine->send = buf;
  else mine->recv = buf;
  mine->count = n;
  mine->dtype = t;
  others = is_send ? &c->recvs : &c->sends;
  if (*others != NULL) {
    loom_request *other = *others;
    *others = other->next;
    if (is_send) match(mine, other);
    else match(other, mine);
  } else {
    append(is_send ? &c->sends : &c->recvs, mine);
  }
  *q = mine;
  return LOOM_OK;
}

/* (The send's data is only read; the cast lets one function post both.) */
static loom_status self_send(loom_comm *c, const void *b, uint64_t n, loom_dtype t, int32_t peer, loom_request **q) {
  return post_p2p(c, 1, (void *)b, n, t, peer, q);
}
static loom_status self_recv(loom_comm *c, void *b, uint64_t n, loom_dtype t, int32_t peer, loom_request **q) {
  return post_p2p(c, 0, b, n, t, peer, q);
}

static loom_status self_test(loom_request *q, int32_t *done) {
  if (q->done) {
    *done = 1;
    return q->status;
  }
  if (is_aborted(q->comm)) {
    *done = 1;
    return fail(LOOM_ERR_ABORTED, "selfonly: the communicator was aborted");
  }
  *done = 0;
  return LOOM_OK;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Nothing but the caller's next post can complete a pending request, and the
 * caller is blocked here: wait for an abort from another thread, or time out. */
static loom_status self_wait(loom_request *q, int64_t timeout_ms) {
  const struct timespec tick = {0, 1000000}; /* 1 ms */
  int64_t deadline;
  if (q->done) return q->status;
  deadline = now_ms() + (timeout_ms == LOOM_TIMEOUT_DEFAULT ? q->comm->timeout_ms : timeout_ms);
  for (;;) {
    if (is_aborted(q->comm)) return fail(LOOM_ERR_ABORTED, "selfonly: the communicator was aborted");
    if (now_ms() >= deadline) return fail(LOOM_ERR_TIMEOUT, "selfonly: the matching send or receive was not posted");
    nanosleep(&tick, NULL);
  }
}

static void self_request_free(loom_request *q) {
  if (q == NULL || q == &finished) return;
  if (!q->done) { /* a request of an aborted communicator, still queued */
    unlink_request(&q->comm->sends, q);
    unlink_request(&q->comm->recvs, q);
  }
  free(q);
}

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

/* The one exported symbol. The host offers the range of ABI versions it
 * speaks; selfonly speaks 1.0 (it needs nothing a later minor added) up to
 * LOOM_ABI_VERSION, the version of the headers it was built with. It answers
 * with the newest version both speak, or refuses. reply->abi_version is that
 * negotiated version, the one host and plugin both go by; the vtable's
 * abi_version is the layout the table was written for (LOOM_ABI_VERSION),
 * never older than the reply's. */
#define SELFONLY_STR2(x) #x
#define SELFONLY_STR(x) SELFONLY_STR2(x)
LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                         loom_negotiate_reply *reply) {
  uint32_t chosen;
  if (reply->struct_size < sizeof *reply) return LOOM_ERR_INVALID_ARGUMENT; /* every v1 host's reply is this big */
  if (request->struct_size < sizeof *request || request->kind != LOOM_KIND_COLLECTIVE) {
    reply->refusal = "selfonly: not a request for a v1 collective";
    return LOOM_ERR_UNSUPPORTED;
  }
  chosen = request->abi_max < LOOM_ABI_VERSION ? request->abi_max : LOOM_ABI_VERSION;
  if (LOOM_ABI_MAJOR_OF(chosen) != LOOM_ABI_MAJOR || chosen < request->abi_min) {
    reply->refusal = "selfonly speaks Loom ABI 1.0 to 1." SELFONLY_STR(LOOM_ABI_MINOR);
    return LOOM_ERR_UNSUPPORTED;
  }
  reply->abi_version = chosen;
  reply->vtable = &vtable;
  return LOOM_OK;
}
