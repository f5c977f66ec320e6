/* SPDX-License-Identifier: Apache-2.0 */
// f16/bf16 <-> f32 conversions: the one copy shared by the plugins lives in
// plugins/common/half_float.h (header-only, so nothing is exported).
#ifndef LOOM_MPI_HALF_H
#define LOOM_MPI_HALF_H

#include "../common/half_float.h"

namespace loom_mpi {
using loom_plugin_common::bf16_to_float;
using loom_plugin_common::bits_float;
using loom_plugin_common::f16_to_float;
using loom_plugin_common::float_bits;
using loom_plugin_common::float_to_bf16;
using loom_plugin_common::float_to_f16;
}  // namespace loom_mpi

#endif  // LOOM_MPI_HALF_H
