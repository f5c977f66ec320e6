/* SPDX-License-Identifier: Apache-2.0 */
// The options the plugin declares (loom plugins info nccl lists them); the
// host hands their values to init through get_option.
#ifndef LOOM_NCCL_OPTIONS_H
#define LOOM_NCCL_OPTIONS_H

#include "loom/cxx/options.hpp"
#include "loom/plugin.h"

namespace loom_nccl {

enum OptionIndex { kOptTimeoutMs, kOptWatchdogMs, kNumOptions };

inline constexpr loom_option_decl kOptions[kNumOptions] = {
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "timeout_ms", "300000",
     "Milliseconds a wait, comm_create or one posted operation may take when the communicator config gives no "
     "timeout; an operation still running after it aborts its communicator (TIMEOUT)."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "watchdog_ms", "50",
     "Milliseconds between two looks of a communicator's watchdog at NCCL's asynchronous errors and at the "
     "deadlines of the posted operations."},
};

// The table's order must follow OptionIndex: a swapped pair compiles and
// silently reads one option's value for another.
using loom::cxx::same_name;
static_assert(same_name(kOptions[kOptTimeoutMs].name, "timeout_ms") &&
                  same_name(kOptions[kOptWatchdogMs].name, "watchdog_ms"),
              "kOptions is out of step with OptionIndex");

}  // namespace loom_nccl

#endif  // LOOM_NCCL_OPTIONS_H
