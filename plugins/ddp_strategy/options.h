/* SPDX-License-Identifier: Apache-2.0 */
// The options the plugin declares (loom plugins info ddp lists them); the
// host hands their values to init through get_option.
#ifndef LOOM_DDP_OPTIONS_H
#define LOOM_DDP_OPTIONS_H

#include "loom/plugin.h"

namespace loom_ddp {

enum OptionIndex { kOptCollective, kOptBucketMb, kOptTimeoutMs, kNumOptions };

inline constexpr loom_option_decl kOptions[kNumOptions] = {
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "collective", "mpi",
     "Name of the collective plugin that averages the gradients (lib<name>_collective.so)."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "bucket_mb", "25",
     "Size in MiB of the flat gradient buckets, each averaged by one non-blocking allreduce."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "timeout_ms", "300000",
     "Milliseconds any collective step (gradient averaging, a metric, a barrier) may take before it fails."},
};

}  // namespace loom_ddp

#endif  // LOOM_DDP_OPTIONS_H
