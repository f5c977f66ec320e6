// SPDX-License-Identifier: Apache-2.0
// The one exported symbol: negotiation, and the static info and vtable it
// hands out.
#include <cstddef>

#include "instance.h"
#include "loom/cxx/strategy.hpp"
#include "options.h"

namespace loom_ddp {
namespace {

constexpr loom_plugin_info kInfo = {
    sizeof(loom_plugin_info),
    LOOM_KIND_STRATEGY,
    "ddp",
    "0.1.0",
    "Synchronous data parallelism: rank 0's parameters broadcast, gradients averaged in buckets over a collective.",
    LOOM_CAP_DEVICE_MEMORY,  // CUDA tensors over a CUDA collective (nccl), on the host's stream
    kOptions,
    kNumOptions,
};

constexpr loom_strategy_v1 kVtable = LOOM_CXX_STRATEGY_VTABLE(&kInfo);

}  // namespace
}  // namespace loom_ddp

// Static answers only: the host may call this in a scanner process just to
// list the plugin, so it must not allocate, block or open a collective.
LOOM_CXX_STRATEGY_ENTRY(loom_ddp::kVtable, "ddp")
