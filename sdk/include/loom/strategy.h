/*
 * loom/strategy.h: the strategy plugin ABI, version 1 (PROVISIONAL).
 *
 * A strategy decides how training is distributed: when gradients are
 * averaged, with whom, and when the optimizer steps (DDP, collaborative
 * swarms). It exports
 *
 *     LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(
 *         const loom_negotiate_request *, loom_negotiate_reply *);
 *
 * which answers with a const loom_strategy_v1 * as reply->vtable.
 *
 * This header is a skeleton: the descriptor, lifecycle and error functions
 * below are final; the training hooks (setup, after_backward, ...) are
 * appended by the trainer work before v1 is frozen, so nothing built against
 * this revision is expected to load into a later host.
 *
 * Thread safety: the host calls a strategy from one thread at a time.
 */
#ifndef LOOM_STRATEGY_H
#define LOOM_STRATEGY_H

#include "loom/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_strategy_ctx loom_strategy_ctx; /* one initialised strategy instance */

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
} loom_strategy_v1;

#define LOOM_STRATEGY_ENTRY loom_strategy_plugin_v1
#define LOOM_STRATEGY_ENTRY_NAME "loom_strategy_plugin_v1"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_STRATEGY_H */
