// SPDX-License-Identifier: Apache-2.0
// Loom C++ plugin layer for strategies: what a C++17 strategy plugin shares
// with the others, on top of the C ABI (strategy.h). Header-only; nothing is
// exported but the entry function the macro below writes.
//
//   errors.hpp     fail, last_error_text, guarded
//   options.hpp    typed reading of the declared options
//   negotiate.hpp  the entry's negotiation
//
//   namespace my_strategy {
//   constexpr loom_plugin_info kInfo = {...};
//   constexpr loom_strategy_v1 kVtable = LOOM_CXX_STRATEGY_VTABLE(&kInfo);
//   }
//   LOOM_CXX_STRATEGY_ENTRY(my_strategy::kVtable, "my")
#ifndef LOOM_CXX_STRATEGY_HPP
#define LOOM_CXX_STRATEGY_HPP

#include "loom/cxx/errors.hpp"
#include "loom/cxx/negotiate.hpp"
#include "loom/cxx/options.hpp"
#include "loom/plugin.h"
#include "loom/strategy.h"

// The vtable of ABI 1.0's strategy functions, found by their vtable names
// in the scope of the expansion (init, fini, last_error, setup, teardown,
// data_shard, after_backward, after_optimizer_step, reduce_metric,
// reduce_decision, barrier, broadcast_bytes, is_global_zero, global_step,
// should_stop, status_line). Later members (sample_salt, ABI 1.1) are set
// on the result by a plugin that has them. A constant expression.
#define LOOM_CXX_STRATEGY_VTABLE(info_ptr)              \
  [] {                                                \
    loom_strategy_v1 v{};                             \
    v.struct_size = sizeof(loom_strategy_v1);         \
    v.abi_version = LOOM_ABI_VERSION;                 \
    v.info = (info_ptr);                              \
    v.init = init;                                    \
    v.fini = fini;                                    \
    v.last_error = last_error;                        \
    v.setup = setup;                                  \
    v.teardown = teardown;                            \
    v.data_shard = data_shard;                        \
    v.after_backward = after_backward;                \
    v.after_optimizer_step = after_optimizer_step;    \
    v.reduce_metric = reduce_metric;                  \
    v.reduce_decision = reduce_decision;              \
    v.barrier = barrier;                              \
    v.broadcast_bytes = broadcast_bytes;              \
    v.is_global_zero = is_global_zero;                \
    v.global_step = global_step;                      \
    v.should_stop = should_stop;                      \
    v.status_line = status_line;                      \
    return v;                                         \
  }()

// The plugin's one exported symbol, loom_strategy_plugin_v1 (see
// LOOM_CXX_COLLECTIVE_ENTRY in collective.hpp).
#define LOOM_CXX_STRATEGY_ENTRY_SINCE(vtable, name, lowest)                                              \
  extern "C" LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(const loom_negotiate_request *request, \
                                                                    loom_negotiate_reply *reply) {      \
    static constexpr ::loom::cxx::Refusals kLoomCxxRefusals =                                           \
        LOOM_CXX_REFUSALS(name " strategy plugin", "strategy");                                         \
    return ::loom::cxx::negotiate(request, reply, LOOM_KIND_STRATEGY, (lowest), &(vtable), kLoomCxxRefusals); \
  }
#define LOOM_CXX_STRATEGY_ENTRY(vtable, name) LOOM_CXX_STRATEGY_ENTRY_SINCE(vtable, name, LOOM_ABI_VERSION_MIN)

#endif  // LOOM_CXX_STRATEGY_HPP
