/* SPDX-License-Identifier: Apache-2.0 */
/* Gives abidw something to describe: one exported function per frozen v1
 * SDK struct, so the sdk.abi test can compare their layout with the saved
 * baseline (sdk/abi/loom-sdk-v1.abi) and fail on any change. */
#include "loom/collective.h"
#include "loom/plugin.h"
#include "loom/strategy.h"

#define PROBE(type) \
  __attribute__((visibility("default"))) size_t loom_abi_probe_##type(const type *value) { return value->struct_size; }

PROBE(loom_option_decl)
PROBE(loom_plugin_info)
PROBE(loom_host_v1)
PROBE(loom_negotiate_request)
PROBE(loom_negotiate_reply)
PROBE(loom_oob_v1)
PROBE(loom_comm_config_v1)
PROBE(loom_collective_v1)
PROBE(loom_comm_stats_v1)
PROBE(loom_training_state_v1)
PROBE(loom_strategy_v1)
