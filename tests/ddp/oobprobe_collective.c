/* SPDX-License-Identifier: Apache-2.0 */
/* liboobprobe_collective.so: a collective that only checks the out-of-band
 * exchange it is given. comm_create runs two allgathers through config->oob,
 * checks that every rank's contribution arrived in rank order, and then
 * refuses with LOOM_ERR_UNAVAILABLE and a message saying what it saw
 * ("oobprobe: out-of-band allgather verified ..."), so a strategy's setup
 * fails with that message. Every operation is a stub. Not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/collective.h"

struct loom_collective_ctx {
  int unused;
};

static char g_error[512] = "no error";

static loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) {
  (void)host;
  (void)why;
  (void)why_len;
  *ctx = (loom_collective_ctx *)calloc(1, sizeof(loom_collective_ctx));
  return *ctx ? LOOM_OK : LOOM_ERR_SYSTEM;
}

static void fini(loom_collective_ctx *ctx) {
  free(ctx);
}

static const char *last_error(loom_collective_ctx *ctx) {
  (void)ctx;
  return g_error;
}

/* One round: each rank sends len bytes of (round * 31 + rank + i) and checks all. */
static loom_status round_trip(const loom_comm_config_v1 *config, int round, size_t len) {
  unsigned char *send = (unsigned char *)malloc(len);
  unsigned char *recv = (unsigned char *)malloc(len * (size_t)config->size);
  loom_status s;
  size_t i;
  int r;
  if (!send || !recv) {
    free(send);
    free(recv);
    snprintf(g_error, sizeof g_error, "oobprobe: out of memory");
    return LOOM_ERR_SYSTEM;
  }
  for (i = 0; i < len; ++i) send[i] = (unsigned char)(round * 31 + config->rank + (int)i);
  s = config->oob->allgather(config->oob->user, send, len, recv, config->timeout_ms);
  if (s != LOOM_OK) {
    snprintf(g_error, sizeof g_error, "oobprobe: out-of-band allgather round %d failed with %s", round,
             loom_status_name(s));
  } else {
    for (r = 0; r < config->size && s == LOOM_OK; ++r) {
      for (i = 0; i < len; ++i) {
        if (recv[(size_t)r * len + i] != (unsigned char)(round * 31 + r + (int)i)) {
          snprintf(g_error, sizeof g_error, "oobprobe: round %d: byte %zu from rank %d is wrong", round, i, r);
          s = LOOM_ERR_INTERNAL;
          break;
        }
      }
    }
  }
  free(send);
  free(recv);
  return s;
}

static loom_status comm_create(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm) {
  loom_status s;
  (void)ctx;
  *comm = NULL;
  if (!config->oob) {
    snprintf(g_error, sizeof g_error, "oobprobe: no out-of-band exchange was given");
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  s = round_trip(config, 1, 8);
  if (s == LOOM_OK) s = round_trip(config, 2, 300);
  if (s != LOOM_OK) return s;
  snprintf(g_error, sizeof g_error, "oobprobe: out-of-band allgather verified over %d ranks (2 rounds, this rank %d)",
           config->size, config->rank);
  return LOOM_ERR_UNAVAILABLE;
}

static loom_status unsupported(void) {
  snprintf(g_error, sizeof g_error, "oobprobe: operations are not implemented");
  return LOOM_ERR_UNSUPPORTED;
}
static loom_status comm_destroy(loom_comm *c) {
  (void)c;
  return LOOM_OK;
}
static loom_status comm_abort(loom_comm *c) {
  (void)c;
  return LOOM_OK;
}
static loom_status allreduce(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype d, loom_reduce_op o,
                             loom_request **q) {
  (void)c;
  (void)s;
  (void)r;
  (void)n;
  (void)d;
  (void)o;
  (void)q;
  return unsupported();
}
static loom_status broadcast(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype d, int32_t root,
                             loom_request **q) {
  (void)c;
  (void)s;
  (void)r;
  (void)n;
  (void)d;
  (void)root;
  (void)q;
  return unsupported();
}
static loom_status reduce(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype d, loom_reduce_op o,
                          int32_t root, loom_request **q) {
  (void)c;
  (void)s;
  (void)r;
  (void)n;
  (void)d;
  (void)o;
  (void)root;
  (void)q;
  return unsupported();
}
static loom_status allgather(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype d, loom_request **q) {
  (void)c;
  (void)s;
  (void)r;
  (void)n;
  (void)d;
  (void)q;
  return unsupported();
}
static loom_status reduce_scatter(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype d, loom_reduce_op o,
                                  loom_request **q) {
  (void)c;
  (void)s;
  (void)r;
  (void)n;
  (void)d;
  (void)o;
  (void)q;
  return unsupported();
}
static loom_status alltoall(loom_comm *c, const void *s, void *r, uint64_t n, loom_dtype d, loom_request **q) {
  (void)c;
  (void)s;
  (void)r;
  (void)n;
  (void)d;
  (void)q;
  return unsupported();
}
static loom_status barrier(loom_comm *c, loom_request **q) {
  (void)c;
  (void)q;
  return unsupported();
}
static loom_status send(loom_comm *c, const void *b, uint64_t n, loom_dtype d, int32_t p, loom_request **q) {
  (void)c;
  (void)b;
  (void)n;
  (void)d;
  (void)p;
  (void)q;
  return unsupported();
}
static loom_status recv(loom_comm *c, void *b, uint64_t n, loom_dtype d, int32_t p, loom_request **q) {
  (void)c;
  (void)b;
  (void)n;
  (void)d;
  (void)p;
  (void)q;
  return unsupported();
}
static loom_status test(loom_request *q, int32_t *done) {
  (void)q;
  *done = 1;
  return unsupported();
}
static loom_status wait(loom_request *q, int64_t t) {
  (void)q;
  (void)t;
  return unsupported();
}
static void request_free(loom_request *q) {
  (void)q;
}

static const loom_plugin_info kInfo = {sizeof(loom_plugin_info),
                                       LOOM_KIND_COLLECTIVE,
                                       "oobprobe",
                                       "0.0.1",
                                       "Test collective: verifies the out-of-band exchange, then refuses.",
                                       LOOM_CAP_HOST_MEMORY,
                                       NULL,
                                       0};

/* A 1.0-sized vtable: hosts must still take plugins built before 1.3. */
static const loom_collective_v1 kVtable = {LOOM_COLLECTIVE_V1_0_SIZE,
                                           LOOM_ABI_VERSION,
                                           &kInfo,
                                           init,
                                           fini,
                                           last_error,
                                           comm_create,
                                           comm_destroy,
                                           comm_abort,
                                           allreduce,
                                           broadcast,
                                           reduce,
                                           allgather,
                                           reduce_scatter,
                                           alltoall,
                                           barrier,
                                           send,
                                           recv,
                                           test,
                                           wait,
                                           request_free,
                                           NULL,  /* allreduce_scaled (1.3) */
                                           NULL,  /* comm_last_error (1.7) */
                                           0,     /* absent_ops (1.7) */
                                           NULL}; /* comm_stats (1.11) */

LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                         loom_negotiate_reply *reply) {
  if (!request || !reply || request->kind != LOOM_KIND_COLLECTIVE || request->abi_min > LOOM_ABI_VERSION ||
      request->abi_max < LOOM_ABI_VERSION)
    return LOOM_ERR_UNSUPPORTED;
  reply->abi_version = LOOM_ABI_VERSION;
  reply->vtable = &kVtable;
  reply->refusal = NULL;
  return LOOM_OK;
}
