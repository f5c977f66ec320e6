/* SPDX-License-Identifier: Apache-2.0 */
// The options the plugin declares (loom plugins info mpi lists them); the
// host hands their values to init through get_option.
#ifndef LOOM_MPI_OPTIONS_H
#define LOOM_MPI_OPTIONS_H

#include "loom/plugin.h"

namespace loom_mpi {

enum OptionIndex { kOptTimeoutMs, kOptSpinUs, kOptBlocking, kNumOptions };

inline constexpr loom_option_decl kOptions[kNumOptions] = {
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "timeout_ms", "300000",
     "Milliseconds a wait or comm_create may block when the communicator config gives no timeout."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "spin_us", "20",
     "Microseconds a wait polls MPI without yielding the core; lower it when ranks oversubscribe cores."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "blocking", "false",
     "Run collectives to completion when posted, with MPI's blocking calls (fastest for small messages); waits can "
     "then no longer time out, so a rank that never joins an operation stalls the job, as in plain MPI."},
};

}  // namespace loom_mpi

#endif  // LOOM_MPI_OPTIONS_H
