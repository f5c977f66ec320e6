/* SPDX-License-Identifier: Apache-2.0 */
// Turning a summed gradient bucket into the average. The strategy asks the
// collective for SUM and divides here, as PyTorch's DDP divides by the world
// size itself, so the cost does not depend on how well a backend implements
// AVG (plugins/common/average.h holds the one vectorised division).
#ifndef LOOM_DDP_DIVIDE_H
#define LOOM_DDP_DIVIDE_H

#include <cstdint>

#include "../common/average.h"
#include "loom/collective.h"

namespace loom_ddp {

// Whether the strategy divides dtype itself (f32 and f64); other dtypes are
// averaged by the collective (LOOM_REDUCE_AVG).
inline bool divides_here(loom_dtype dtype) { return dtype == LOOM_DTYPE_F32 || dtype == LOOM_DTYPE_F64; }

// data[i] /= divisor, one IEEE division each, as the collective's AVG rounds.
using loom_plugin_common::divide_in_place;

}  // namespace loom_ddp

#endif  // LOOM_DDP_DIVIDE_H
