/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loom/strategy.h: the strategy plugin ABI, version 1.
 *
 * A strategy decides how training is distributed: with whom gradients are
 * averaged, when the optimizer steps, what the global step is (DDP,
 * collaborative swarms). The trainer runs forward and backward and asks the
 * strategy after each backward; a strategy never sees C++ types and never
 * calls LibTorch: it reads and writes gradients through DLPack views.
 *
 * A strategy plugin exports
 *
 *     LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(
 *         const loom_negotiate_request *, loom_negotiate_reply *);
 *
 * which answers with a const loom_strategy_v1 * as reply->vtable. It reaches
 * a collective through the host's open_plugin service and the job's store
 * through the host services. By convention a strategy that uses a collective
 * declares an option named `collective`: the host defaults it to the
 * config's [collective] name and refuses names that are not installed.
 *
 * Lifecycle, in the host's order: init -> setup -> (after_backward ->
 * [optimizer step -> after_optimizer_step])* ... -> teardown -> fini. The
 * other functions may be called between setup and teardown.
 *
 * Thread safety: the host calls a strategy from one thread at a time. A
 * strategy may run threads of its own; it must have joined them by the time
 * teardown returns.
 */
#ifndef LOOM_STRATEGY_H
#define LOOM_STRATEGY_H

#include <dlpack/dlpack.h>

#include "loom/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_strategy_ctx loom_strategy_ctx; /* one initialised strategy instance */

/* What after_backward decides. */
typedef int32_t loom_step_decision;
enum {
  LOOM_STEP_ACCUMULATE = 0, /* keep the gradients; run another forward/backward first */
  LOOM_STEP_APPLY = 1       /* step the optimizer now with the gradients in the buffers */
};

/* Metric reductions across the processes the strategy trains with. */
typedef int32_t loom_metric_op;
enum { LOOM_METRIC_SUM = 1, LOOM_METRIC_MEAN = 2, LOOM_METRIC_MIN = 3, LOOM_METRIC_MAX = 4 };

/* The training state the host lends a strategy, from setup to teardown.
 * Tensors are views of the host's parameters and gradients in place (no
 * copies): a strategy reads and writes the gradient data to average it, and
 * writes parameter data only inside restore-like operations it documents
 * (state averaging). Shapes, dtypes and data pointers stay fixed until
 * teardown. */
typedef struct loom_training_state_v1 {
  uint32_t struct_size;
  uint32_t num_params;
  const DLTensor *params; /* num_params contiguous tensors */
  const DLTensor *grads;  /* same shapes and dtypes as params */
  void *user;             /* pass back to the callbacks */
  /* Serialises the whole training state (parameters, optimizer state, LR
   * schedule, step counters: what a peer joining later needs) into a buffer
   * owned by the host; *data stays valid until the next snapshot or restore
   * call, or teardown. */
  loom_status (*snapshot)(void *user, const uint8_t **data, size_t *len);
  /* Replaces the whole training state with one made by snapshot (possibly in
   * another process). LOOM_ERR_INVALID_ARGUMENT for bytes that do not parse
   * or do not fit this model; the state is then unchanged. */
  loom_status (*restore)(void *user, const uint8_t *data, size_t len);
  /* Samples this process trains on per forward/backward (its micro-batch). */
  uint64_t batch_size;
  /* The step the trainer's own counters start from (non-zero on resume). */
  int64_t start_step;
  /* ABI 1.1 (present when struct_size >= LOOM_TRAINING_STATE_V1_1_SIZE): the
   * global step at which training ends, so a strategy can finish its work
   * (e.g. a last state averaging) in the final after_optimizer_step; -1 when
   * unknown. */
  int64_t max_steps;
  /* ABI 1.2 (present when struct_size >= LOOM_TRAINING_STATE_V1_2_SIZE; may
   * be NULL when the host has none to lend): the optimizer's floating-point
   * statistics (SGD's momentum buffers, Adam's first and second moments),
   * *count tensors in an order fixed by the optimizer and the parameters, so
   * that processes training the same model with the same optimizer get the
   * same list. *count is 0 before the optimizer's first step. Called on the
   * training thread from after_optimizer_step; the array and the tensors it
   * describes are owned by the host and valid until the next optimizer step,
   * restore or call. The strategy may write the data (e.g. to average it
   * across processes), never shapes or dtypes. */
  loom_status (*optimizer_state)(void *user, const DLTensor **tensors, uint32_t *count);
  /* ABI 1.4 (present when struct_size >= LOOM_TRAINING_STATE_V1_4_SIZE; may
   * be NULL): the model's floating-point tensors that are not trained but
   * are part of its state (BatchNorm's running mean and variance), *count
   * tensors in an order fixed by the model, the same in every process
   * training it; *count may be 0. A strategy that makes processes agree on
   * the parameters makes them agree on these too (DDP broadcasts them at
   * setup; a swarm averages them with the parameters). Snapshots already
   * hold them. Called on the training thread from setup,
   * after_optimizer_step or teardown; the array and the tensors it
   * describes are owned by the host and valid until the next forward,
   * restore or call. The strategy may write the data, never shapes or
   * dtypes. */
  loom_status (*buffers)(void *user, const DLTensor **tensors, uint32_t *count);
  /* ABI 1.5 (present when struct_size >= LOOM_TRAINING_STATE_V1_5_SIZE; may
   * be NULL): what is trained, as text that is equal in every process that
   * trains the same model with the same optimizer and differs otherwise. One
   * item per line, in a fixed order: the task, each parameter ("param NAME
   * DTYPE [d0, d1]"), each buffer ("buffer NAME DTYPE [d0]") and the
   * optimizer with its state's layout. A strategy that joins processes which
   * start apart (a swarm) compares it to refuse mixing different models, and
   * names the first line that differs. Lives until teardown. */
  const char *description;
  /* ABI 1.6 (present when struct_size >= LOOM_TRAINING_STATE_V1_6_SIZE):
   * where the lent tensors live, and the host's services for that memory,
   * so that a strategy which does not link the device's runtime can still
   * move bytes there. Only a strategy with LOOM_CAP_DEVICE_MEMORY is lent
   * device tensors; a host training on a device lends any other strategy
   * host memory (see LOOM_CAP_DEVICE_MEMORY). */
  /* The device of the parameters, gradients, buffers and optimizer state:
   * {kDLCPU, 0} for host memory, {kDLCUDA, ordinal} on a GPU. */
  DLDevice device;
  /* The cudaStream_t the host computes on, for kDLCUDA (never NULL there:
   * the legacy default stream is passed as cudaStreamLegacy, (void *)0x1);
   * NULL for kDLCPU. What the host enqueued before it calls the strategy
   * (backward, before after_backward) runs before what the strategy
   * enqueues on this stream during the call, and what the host enqueues
   * after the call (the optimizer step) runs after it: a strategy that
   * works on this stream (a collective created with it) needs no
   * synchronisation of its own. */
  void *stream;
  /* Device memory: bytes bytes on device, ordered on stream (*ptr is NULL
   * for 0 bytes); given back with free_device. Training thread only. */
  loom_status (*alloc_device)(void *user, size_t bytes, void **ptr);
  void (*free_device)(void *user, void *ptr);
  /* Copies bytes from src to dst; each is host memory (*_on_device == 0)
   * or device memory from the tensors above or alloc_device (1). Ordered
   * after the stream's earlier work; returns once the bytes are in dst.
   * Training thread only. */
  loom_status (*copy)(void *user, void *dst, int32_t dst_on_device, const void *src, int32_t src_on_device,
                      size_t bytes);
  /* ABI 1.10 (present when struct_size >= LOOM_TRAINING_STATE_V1_10_SIZE;
   * may be NULL): the mean training loss of the optimizer-step window the
   * host is handing over, as it computed it (the mean over the window's
   * micro-batches). Valid during after_backward, on the training thread.
   * *loss may be NaN or infinite: that is what the host saw. Returns
   * LOOM_ERR_UNAVAILABLE when the host knows no loss for this window (an
   * external training loop that was not told it). A swarm peer publishes it
   * so that observers can show the swarm's loss (hivemind's metrics). */
  loom_status (*window_loss)(void *user, double *loss);
} loom_training_state_v1;

typedef struct loom_strategy_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  const loom_plugin_info *info; /* info->kind == LOOM_KIND_STRATEGY */

  /* As loom_collective_v1.init: LOOM_ERR_UNAVAILABLE or another code with the
   * reason in why, *ctx left NULL. */
  loom_status (*init)(const loom_host_v1 *host, loom_strategy_ctx **ctx, char *why, size_t why_len);
  void (*fini)(loom_strategy_ctx *ctx);
  /* As loom_collective_v1.last_error. */
  const char *(*last_error)(loom_strategy_ctx *ctx);

  /* Connects to the other processes and makes the training state agree
   * (DDP: broadcast rank 0's parameters). state lives until teardown. */
  loom_status (*setup)(loom_strategy_ctx *ctx, const loom_training_state_v1 *state);
  /* Leaves the group; the state is no longer touched after it returns. */
  loom_status (*teardown)(loom_strategy_ctx *ctx);

  /* Which share of the data this process trains on: shard index and count
   * (DDP: rank and world size; a swarm peer: 0 of 1, it samples on its own). */
  loom_status (*data_shard)(loom_strategy_ctx *ctx, int32_t *index, int32_t *count);

  /* Called once per optimizer-step window (after the last backward of a
   * gradient-accumulation window), with the samples the window covered. Sets
   * *decision; on LOOM_STEP_APPLY the gradient buffers hold what the
   * optimizer must apply (averaged as the strategy sees fit). */
  loom_status (*after_backward)(loom_strategy_ctx *ctx, uint64_t local_samples, loom_step_decision *decision);
  /* Called after the optimizer stepped (the host then zeroes gradients). */
  loom_status (*after_optimizer_step)(loom_strategy_ctx *ctx);

  /* Reduces *value in place across the processes training together. */
  loom_status (*reduce_metric)(loom_strategy_ctx *ctx, double *value, loom_metric_op op);
  /* *decision (0 or 1) becomes the AND (all != 0) or OR of every process's;
   * the strategy, not the collective, owns this (Lightning's
   * reduce_boolean_decision). */
  loom_status (*reduce_decision)(loom_strategy_ctx *ctx, int32_t *decision, int32_t all);
  loom_status (*barrier)(loom_strategy_ctx *ctx);
  /* Copies root's len bytes at data into every process's data (len equal everywhere). */
  loom_status (*broadcast_bytes)(loom_strategy_ctx *ctx, void *data, uint64_t len, int32_t root);

  /* 1 on the process that logs and writes checkpoints, else 0. */
  int32_t (*is_global_zero)(loom_strategy_ctx *ctx);
  /* The number of optimizer steps the whole job has taken: the LR schedule
   * and max_steps follow it, not the local count. */
  int64_t (*global_step)(loom_strategy_ctx *ctx);
  /* 1 when the strategy wants training to end (e.g. the swarm finished). */
  int32_t (*should_stop)(loom_strategy_ctx *ctx);
  /* One line for the progress display ("4 peers, epoch 12, 3100/8192
   * samples"); owned by the plugin, valid until the next call. Never NULL. */
  const char *(*status_line)(loom_strategy_ctx *ctx);

  /* ABI 1.1 (the host calls it only when struct_size >= LOOM_STRATEGY_V1_1_SIZE
   * and it is not NULL): a value the host mixes into its data-sampling seed.
   * 0 (or no function) for strategies whose processes split one sample order
   * between them (DDP, via data_shard); a value unique to the process for
   * peers that each sample on their own, so they do not all train on the same
   * batches. Called once, after setup. */
  uint64_t (*sample_salt)(loom_strategy_ctx *ctx);

  /* ABI 1.8 (the host calls it only when struct_size >= LOOM_STRATEGY_V1_8_SIZE
   * and it is not NULL; NULL for strategies that have nothing to load): loads,
   * now, the newest training state the other processes hold (a swarm peer
   * downloads and checks a donor's, as a joiner does) through the state's
   * restore, and moves global_step to its step. Called on the training
   * thread between steps, after setup; blocks at most the strategy's own
   * load timeout. LOOM_OK when a state was loaded; LOOM_ERR_UNAVAILABLE
   * (with last_error saying why) when none could be (no other process, none
   * newer than this one's, none that passed its checks): the state is then
   * unchanged. hivemind's load_state_from_peers(). */
  loom_status (*load_state)(loom_strategy_ctx *ctx);
} loom_strategy_v1;

/* Sizes of the structs as ABI 1.0 froze them: the smallest a reader accepts. */
#define LOOM_TRAINING_STATE_V1_0_SIZE 64u
#define LOOM_STRATEGY_V1_0_SIZE 144u
/* Sizes with the members ABI 1.1 appended. */
#define LOOM_TRAINING_STATE_V1_1_SIZE 72u
#define LOOM_STRATEGY_V1_1_SIZE 152u
/* Sizes with the members ABI 1.2 appended. */
#define LOOM_TRAINING_STATE_V1_2_SIZE 80u
/* Sizes with the members ABI 1.4 appended. */
#define LOOM_TRAINING_STATE_V1_4_SIZE 88u
/* Sizes with the members ABI 1.5 appended. */
#define LOOM_TRAINING_STATE_V1_5_SIZE 96u
/* Sizes with the members ABI 1.6 appended. */
#define LOOM_TRAINING_STATE_V1_6_SIZE 136u
/* Sizes with the members ABI 1.8 appended. */
#define LOOM_STRATEGY_V1_8_SIZE 160u
/* Sizes with the members ABI 1.10 appended. */
#define LOOM_TRAINING_STATE_V1_10_SIZE 144u

/* Strategy capability bits (loom_plugin_info.capabilities), ABI 1.5. */
/* The strategy finds a non-finite loss in the gradients it is given (NaN or
 * inf in any of them), keeps them out of what it averages, and recovers the
 * process's state itself (a swarm peer reloads the swarm's state). The host
 * then checks only the gradients the strategy hands back for a step, not the
 * local loss, before it applies trainer.on_nonfinite. */
#define LOOM_CAP_HEALS_NONFINITE ((uint64_t)1 << 0)
/* ABI 1.6: the strategy works on tensors in device memory (the state's
 * device, stream and memory services). A host that trains on a device
 * lends a strategy without this bit host copies of the parameters,
 * gradients, buffers and optimizer state instead (host staging): it copies
 * them to the host before every call into the strategy, and back after it,
 * so the strategy sees and changes the training state as if it lived in
 * host memory. A swarm peer on a GPU averages through host buffers so. */
#define LOOM_CAP_DEVICE_MEMORY ((uint64_t)1 << 1)

#define LOOM_STRATEGY_ENTRY loom_strategy_plugin_v1
#define LOOM_STRATEGY_ENTRY_NAME "loom_strategy_plugin_v1"

#if UINTPTR_MAX == 0xffffffffffffffffu
LOOM_STATIC_ASSERT(sizeof(loom_training_state_v1) == LOOM_TRAINING_STATE_V1_10_SIZE, "loom_training_state_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, window_loss) == LOOM_TRAINING_STATE_V1_6_SIZE, "1.10 appends after 1.6");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, device) == LOOM_TRAINING_STATE_V1_5_SIZE, "1.6 appends after 1.5");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, description) == LOOM_TRAINING_STATE_V1_4_SIZE, "1.5 appends after 1.4");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, max_steps) == LOOM_TRAINING_STATE_V1_0_SIZE, "1.1 appends after 1.0");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, optimizer_state) == LOOM_TRAINING_STATE_V1_1_SIZE, "1.2 appends after 1.1");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, buffers) == LOOM_TRAINING_STATE_V1_2_SIZE, "1.4 appends after 1.2");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, restore) == 40, "loom_training_state_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_training_state_v1, start_step) == 56, "loom_training_state_v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_strategy_v1) == LOOM_STRATEGY_V1_8_SIZE, "loom_strategy_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_strategy_v1, load_state) == LOOM_STRATEGY_V1_1_SIZE, "1.8 appends after 1.1");
LOOM_STATIC_ASSERT(offsetof(loom_strategy_v1, sample_salt) == LOOM_STRATEGY_V1_0_SIZE, "1.1 appends after 1.0");
LOOM_STATIC_ASSERT(offsetof(loom_strategy_v1, setup) == 40, "loom_strategy_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_strategy_v1, status_line) == 136, "loom_strategy_v1 layout is frozen");
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_STRATEGY_H */
