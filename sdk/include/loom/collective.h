/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loom/collective.h: the collective plugin ABI, version 1.
 *
 * A collective plugin moves and reduces buffers among the members of a
 * communicator (MPI, UCX, NCCL...). It exports
 *
 *     LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(
 *         const loom_negotiate_request *, loom_negotiate_reply *);
 *
 * which answers with a const loom_collective_v1 * as reply->vtable.
 *
 * Semantics (shared by every backend, after NCCL and c10d):
 *  - Counts are in elements, never bytes.
 *  - Every operation is non-blocking: it posts the work and returns a request.
 *    test() never blocks; wait() blocks at most its timeout. A blocking call
 *    is post + wait(LOOM_TIMEOUT_DEFAULT). A dead peer surfaces as
 *    LOOM_ERR_PEER_FAILED or LOOM_ERR_TIMEOUT, never as a hang.
 *  - All members post the same operations, with the same counts, dtypes,
 *    reduce ops and roots, in the same order.
 *  - In place, as NCCL defines it: allreduce, broadcast and reduce when
 *    send == recv; reduce_scatter when recv == send + rank * recvcount;
 *    allgather when send == recv + rank * sendcount; alltoall when
 *    send == recv. Any other overlap of send and recv is invalid.
 *  - Buffers are borrowed: they MUST stay valid and untouched until the
 *    request completes successfully, or, after an abort or a failure (e.g.
 *    PEER_FAILED, TIMEOUT), until comm_destroy returns: a backend may still
 *    be reading or writing them (some read a sender's memory across processes
 *    on one host with process_vm_readv, which Yama or seccomp may forbid).
 *    NULL buffers are valid when the count is 0 (an empty tensor's data).
 *  - Once a communicator is aborted, posting fails with LOOM_ERR_ABORTED and
 *    test() on its unfinished requests sets *done and returns ABORTED.
 *  - When a post has several faults, one order decides which code it gets,
 *    so every backend answers alike: LOOM_ERR_INVALID_ARGUMENT first (bad
 *    pointers, counts, dtypes, reduce ops, roots, peers, overlaps, and a
 *    NaN or infinite scale), then LOOM_ERR_ABORTED (the communicator was
 *    aborted or has failed), then LOOM_ERR_UNSUPPORTED (a valid call this
 *    backend cannot do, e.g. host memory on a device-only backend). All of
 *    them are found at post: nothing is posted and *request is NULL.
 *  - A plugin may leave operations out (ABI 1.7): it lists them in the
 *    vtable's absent_ops, and their entries may be NULL. Hosts check
 *    absent_ops before relying on an operation and never call an absent
 *    one; a plugin that still receives the call returns
 *    LOOM_ERR_UNSUPPORTED.
 *
 * Thread safety: the vtable functions are safe to call concurrently on
 * different communicators. Posting, test, wait and request_free on one
 * communicator must be serialised by the caller, except comm_abort, which may
 * be called from any thread at any time and makes every waiter on that
 * communicator return LOOM_ERR_ABORTED promptly.
 */
#ifndef LOOM_COLLECTIVE_H
#define LOOM_COLLECTIVE_H

#include "loom/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. */
typedef uint32_t loom_dtype;
enum {
  LOOM_DTYPE_F16 = 1,  /* IEEE 754 binary16 */
  LOOM_DTYPE_BF16 = 2, /* bfloat16: the top half of a binary32 */
  LOOM_DTYPE_F32 = 3,
  LOOM_DTYPE_F64 = 4,
  LOOM_DTYPE_I8 = 5,
  LOOM_DTYPE_U8 = 6,
  LOOM_DTYPE_I32 = 7,
  LOOM_DTYPE_I64 = 8
};

/* Reduce operations. AVG is SUM divided by the communicator size (integer
 * division for integer dtypes); a backend without a native average divides
 * after the sum. */
typedef uint32_t loom_reduce_op;
enum {
  LOOM_REDUCE_SUM = 1,
  LOOM_REDUCE_PROD = 2,
  LOOM_REDUCE_MIN = 3,
  LOOM_REDUCE_MAX = 4,
  LOOM_REDUCE_AVG = 5
};

/* Capability bits, in loom_plugin_info.capabilities. The host checks them
 * before relying on the behaviour. */
#define LOOM_CAP_HOST_MEMORY ((uint64_t)1 << 0)    /* buffers in host memory */
#define LOOM_CAP_CUDA_MEMORY ((uint64_t)1 << 1)    /* buffers in CUDA device memory */
#define LOOM_CAP_ASYNC_PROGRESS ((uint64_t)1 << 2) /* progresses without test/wait calls */
#define LOOM_CAP_DYNAMIC_GROUPS ((uint64_t)1 << 3) /* communicators from any member set, many at once */
#define LOOM_CAP_ABORT ((uint64_t)1 << 4)          /* comm_abort unblocks waiters */
#define LOOM_CAP_PEER_FAILURE ((uint64_t)1 << 5)   /* a dead peer gives PEER_FAILED, not only TIMEOUT */
/* ABI 1.1: every operation also accepts request == NULL and then completes
 * before returning, waiting at most the communicator's timeout_ms, and
 * returns the operation's final status (what wait would have returned). No
 * request object exists, so a plugin can skip allocating one; this is the
 * path for small blocking collectives where that cost shows. An inline
 * operation that times out is abandoned and the communicator aborted (the
 * peers are no longer in step); its buffers stay borrowed until comm_destroy.
 * Hosts pass NULL only to plugins that declare this bit. */
#define LOOM_CAP_INLINE_COMPLETION ((uint64_t)1 << 6)
/* ABI 1.3: the vtable's allreduce_scaled is there (struct_size >=
 * LOOM_COLLECTIVE_V1_3_SIZE) and not NULL. */
#define LOOM_CAP_SCALED_ALLREDUCE ((uint64_t)1 << 7)

/* Operations, one bit each, for loom_collective_v1.absent_ops (ABI 1.7).
 * send and recv come as a pair. allreduce_scaled has its capability bit
 * (LOOM_CAP_SCALED_ALLREDUCE) instead. */
#define LOOM_OP_ALLREDUCE ((uint64_t)1 << 0)
#define LOOM_OP_BROADCAST ((uint64_t)1 << 1)
#define LOOM_OP_REDUCE ((uint64_t)1 << 2)
#define LOOM_OP_ALLGATHER ((uint64_t)1 << 3)
#define LOOM_OP_REDUCE_SCATTER ((uint64_t)1 << 4)
#define LOOM_OP_ALLTOALL ((uint64_t)1 << 5)
#define LOOM_OP_BARRIER ((uint64_t)1 << 6)
#define LOOM_OP_SEND_RECV ((uint64_t)1 << 7)
#define LOOM_OP_ALL ((uint64_t)0xff)

/* Opaque objects owned by the plugin. */
typedef struct loom_collective_ctx loom_collective_ctx; /* one initialised plugin instance */
typedef struct loom_comm loom_comm;                     /* a communicator */
typedef struct loom_request loom_request;               /* one posted operation */

/* The out-of-band exchange the caller supplies for communicator creation
 * (the rendezvous store for static jobs, the swarm's own exchange for a
 * collaborative round). */
typedef struct loom_oob_v1 {
  uint32_t struct_size;
  void *user;
  /* Collective over the members being joined: every member contributes len
   * bytes from send, and recv (size * len bytes) receives all contributions in
   * rank order. Blocks at most timeout_ms. Called only from the thread that
   * called comm_create, and only during that call. */
  loom_status (*allgather)(void *user, const void *send, size_t len, void *recv, int64_t timeout_ms);
} loom_oob_v1;
/* A plugin calls oob->allgather at most once per comm_create (callers such as
 * a swarm key the exchange by the group, so a second call could not meet). */

/* Device kinds, numerically equal to DLPack's DLDeviceType. */
enum { LOOM_DEVICE_CPU = 1, LOOM_DEVICE_CUDA = 2 };

/* What a communicator is created from; the host fills it in. */
typedef struct loom_comm_config_v1 {
  uint32_t struct_size;
  int32_t rank;             /* this member's rank, 0 <= rank < size */
  int32_t size;             /* number of members */
  int32_t device_type;      /* LOOM_DEVICE_*: where the buffers live */
  const loom_oob_v1 *oob;   /* borrowed for the duration of comm_create; may be NULL
                               for a plugin that bootstraps itself (MPI) */
  int64_t timeout_ms;       /* default for waits and for comm_create itself; > 0 */
  const char *name;         /* label for logs; borrowed during comm_create */
  int32_t device_id;        /* CUDA device ordinal, else 0 */
  void *stream;             /* cudaStream_t for CUDA buffers, else NULL */
} loom_comm_config_v1;

/* ABI 1.11: a communicator's traffic as one member saw it. Counted per
 * message the plugin's algorithms send or receive between members, whatever
 * carries it (network, shared memory, cross-memory attach): the bytes of the
 * message, the plugin's own message headers included, transport headers
 * (TCP, UCX) not. Only operations that completed successfully on this
 * member count, so over a group of members whose operations all succeeded
 * the bytes sent and the bytes received add up to the same total. */
typedef struct loom_comm_stats_v1 {
  uint32_t struct_size; /* set by the caller */
  uint32_t reserved;    /* 0 */
  uint64_t bytes_sent;
  uint64_t bytes_received;
  uint64_t messages_sent;
  uint64_t messages_received;
  uint64_t operations; /* operations completed on this communicator */
} loom_comm_stats_v1;

/* The vtable. Every function pointer is mandatory unless marked optional,
 * except those of the operations absent_ops lists (ABI 1.7). */
typedef struct loom_collective_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  const loom_plugin_info *info; /* info->kind == LOOM_KIND_COLLECTIVE */

  /* Creates a plugin instance. host lives until fini. On failure returns
   * LOOM_ERR_UNAVAILABLE (cannot work here) or another code, leaves *ctx
   * NULL, and writes the reason into why (NUL-terminated, at most why_len
   * bytes). A process may create several instances. */
  loom_status (*init)(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len);
  /* Destroys an instance after all its communicators were destroyed. */
  void (*fini)(loom_collective_ctx *ctx);
  /* The message of the calling thread's last failed call into this
   * instance; owned by the plugin, valid until that thread's next call.
   * Never NULL. From ABI 1.7, calls on a communicator or a request may
   * report through comm_last_error instead, which needs no per-thread
   * storage. */
  const char *(*last_error)(loom_collective_ctx *ctx);

  /* Creates a communicator; blocking and collective over the members, and
   * bounded by config->timeout_ms. Returns LOOM_ERR_UNAVAILABLE when this
   * plugin cannot build the requested group here. */
  loom_status (*comm_create)(loom_collective_ctx *ctx, const loom_comm_config_v1 *config, loom_comm **comm);
  /* Destroys a communicator whose requests have all been freed. Never blocks
   * on peers, also after a failure or an abort. */
  loom_status (*comm_destroy)(loom_comm *comm);
  /* Marks the communicator failed; every waiter returns LOOM_ERR_ABORTED and
   * so do all later operations. Any thread, any time; idempotent. */
  loom_status (*comm_abort)(loom_comm *comm);

  /* Operations. Each posts the work and, on LOOM_OK, stores a request in
   * *request that the caller MUST free with request_free. On any other
   * status nothing was posted and *request is NULL. */
  loom_status (*allreduce)(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request);
  /* root's send is copied into every member's recv (send is read at root only). */
  loom_status (*broadcast)(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                           int32_t root, loom_request **request);
  /* The reduction lands in root's recv (recv is written at root only). */
  loom_status (*reduce)(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                        loom_reduce_op op, int32_t root, loom_request **request);
  /* recv (size * sendcount elements) receives every member's send in rank order. */
  loom_status (*allgather)(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                           loom_request **request);
  /* send holds size * recvcount elements; member r's recv receives the
   * reduction of every member's block r. */
  loom_status (*reduce_scatter)(loom_comm *comm, const void *send, void *recv, uint64_t recvcount,
                                loom_dtype dtype, loom_reduce_op op, loom_request **request);
  /* Block j (count elements) of member i's send lands in block i of member j's recv. */
  loom_status (*alltoall)(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                          loom_request **request);
  loom_status (*barrier)(loom_comm *comm, loom_request **request);
  /* Point to point; messages between two members arrive in posting order. */
  loom_status (*send)(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                      loom_request **request);
  loom_status (*recv)(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                      loom_request **request);

  /* Never blocks. Sets *done to 1 and returns the operation's status once it
   * has finished; sets *done to 0 and returns LOOM_OK while it runs. */
  loom_status (*test)(loom_request *request, int32_t *done);
  /* Blocks until the operation finishes (its status), timeout_ms passes
   * (LOOM_ERR_TIMEOUT: still pending, may be waited on again) or the
   * communicator is aborted (LOOM_ERR_ABORTED). LOOM_TIMEOUT_DEFAULT uses
   * the communicator's timeout. */
  loom_status (*wait)(loom_request *request, int64_t timeout_ms);
  /* Releases a request that has finished, or any request of an aborted
   * communicator. */
  void (*request_free)(loom_request *request);

  /* ABI 1.3, optional (read it only when struct_size >=
   * LOOM_COLLECTIVE_V1_3_SIZE; NULL when not offered): an allreduce whose
   * result is scale * (the sum over the members), for floating dtypes (F16,
   * BF16, F32, F64; anything else is LOOM_ERR_INVALID_ARGUMENT). Every member
   * passes the same scale, bit for bit (a backend may check it and fail the
   * operation with LOOM_ERR_INVALID_ARGUMENT). A weighted average in one
   * pass over the data: each member sends weight x its value and scale is
   * 1 / (the summed weights); the backend applies the scale while the sum is
   * still in its cache, as it does for AVG, so the result is written once.
   * NCCL's ncclRedOpCreatePreMulSum with one scalar on every rank computes
   * the same. A NaN or infinite scale is LOOM_ERR_INVALID_ARGUMENT at post.
   * In place when send == recv, as allreduce; an out-of-place call never
   * writes send, so a caller may retry from it. */
  loom_status (*allreduce_scaled)(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                                  double scale, loom_request **request);

  /* ABI 1.7, optional (struct_size >= LOOM_COLLECTIVE_V1_7_SIZE; NULL when
   * not offered): the message of the last failed call on this communicator:
   * a post, or test or wait on one of its requests. Calls on one
   * communicator are serialised by the caller, so the plugin can keep the
   * text in the communicator (no per-thread storage); it is valid until the
   * next call on that communicator, and never NULL. A host that has it
   * reads it after such calls instead of last_error. comm_abort, which may
   * run on any thread, reports through last_error only. */
  const char *(*comm_last_error)(loom_comm *comm);
  /* ABI 1.7: the operations this plugin leaves out, as LOOM_OP_* bits; 0
   * (and every plugin older than 1.7) offers them all. The entries of
   * absent operations may be NULL. */
  uint64_t absent_ops;

  /* ABI 1.11, optional (struct_size >= LOOM_COLLECTIVE_V1_11_SIZE; NULL when
   * not offered): what this member of the communicator has moved so far,
   * counted by the plugin itself (see loom_comm_stats_v1). The caller sets
   * stats->struct_size to the size it knows; the plugin fills the members
   * that size covers and leaves the rest alone. Any thread, any time before
   * comm_destroy, also after a failure or an abort; never blocks.
   * LOOM_ERR_INVALID_ARGUMENT for a NULL stats or a struct_size smaller
   * than the 1.11 struct. A plugin that hands whole operations to a library
   * that does not report its traffic (MPI, NCCL) leaves this NULL rather
   * than estimate. */
  loom_status (*comm_stats)(loom_comm *comm, loom_comm_stats_v1 *stats);
} loom_collective_v1;


/* Sizes of the vtable as ABI 1.0 froze it (the smallest a host accepts) and
 * with the members 1.3, 1.7 and 1.11 appended. */
#define LOOM_COLLECTIVE_V1_0_SIZE 160u
#define LOOM_COLLECTIVE_V1_3_SIZE 168u
#define LOOM_COLLECTIVE_V1_7_SIZE 184u
#define LOOM_COLLECTIVE_V1_11_SIZE 192u

/* The entry symbol a collective plugin exports. */
#define LOOM_COLLECTIVE_ENTRY loom_collective_plugin_v1
#define LOOM_COLLECTIVE_ENTRY_NAME "loom_collective_plugin_v1"

#if UINTPTR_MAX == 0xffffffffffffffffu
LOOM_STATIC_ASSERT(sizeof(loom_oob_v1) == 24, "loom_oob_v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_comm_config_v1) == 56, "loom_comm_config_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_comm_config_v1, oob) == 16, "loom_comm_config_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_comm_config_v1, stream) == 48, "loom_comm_config_v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_collective_v1) == LOOM_COLLECTIVE_V1_11_SIZE, "loom_collective_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_collective_v1, comm_stats) == LOOM_COLLECTIVE_V1_7_SIZE, "1.11 appends after 1.7");
LOOM_STATIC_ASSERT(sizeof(loom_comm_stats_v1) == 48, "loom_comm_stats_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_collective_v1, comm_last_error) == LOOM_COLLECTIVE_V1_3_SIZE, "1.7 appends after 1.3");
LOOM_STATIC_ASSERT(offsetof(loom_collective_v1, allreduce_scaled) == LOOM_COLLECTIVE_V1_0_SIZE, "1.3 appends after 1.0");
LOOM_STATIC_ASSERT(offsetof(loom_collective_v1, init) == 16, "loom_collective_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_collective_v1, allreduce) == 64, "loom_collective_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_collective_v1, request_free) == 152, "loom_collective_v1 layout is frozen");
#endif

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
static inline size_t loom_dtype_size(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_DTYPE_F16: case LOOM_DTYPE_BF16: return 2;
    case LOOM_DTYPE_F32: case LOOM_DTYPE_I32: return 4;
    case LOOM_DTYPE_F64: case LOOM_DTYPE_I64: return 8;
    case LOOM_DTYPE_I8: case LOOM_DTYPE_U8: return 1;
    default: return 0;
  }
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_COLLECTIVE_H */
