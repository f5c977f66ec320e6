/* SPDX-License-Identifier: Apache-2.0 */
// Elementwise reductions for every Loom dtype and reduce op, and AVG's
// final division. 16-bit floats are widened to float, reduced and rounded
// back to nearest even after every step, as the MPI plugin does.
#ifndef LOOM_UCX_REDUCE_H
#define LOOM_UCX_REDUCE_H

#include <cstddef>
#include <cstdint>

#include "loom/collective.h"
#include "loom/cxx/checks.hpp"

namespace loom_ucx {

// out[i] = a[i] (op) b[i] for i < n; out may equal a or b (exactly, not a
// partial overlap). AVG reduces as SUM; divide afterwards. `stream`: out
// will not be read again soon (a large vector), so f32/f64 results bypass
// the cache (non-temporal stores: no read of the line before writing it).
void reduce(loom_dtype dtype, loom_reduce_op op, void *out, const void *a, const void *b, size_t n,
            bool stream = false);

// Divides n elements at buf by divisor (AVG after SUM): integer division
// (truncating) for integer dtypes, float division rounded back for halves.
void divide(void *buf, size_t n, loom_dtype dtype, int divisor);

// The reduce op a scaled allreduce (allreduce_scaled) carries inside the
// plugin and on the wire: a SUM whose final blocks are multiplied by the
// operation's scale. Not a public op, so allreduce() refuses it.
constexpr loom_reduce_op kReduceScaledSum = 0x40;

// Multiplies n elements at buf by scale: in f32 for f32 and the 16-bit
// floats (rounded back to nearest even), in f64 for f64.
void scale(void *buf, size_t n, loom_dtype dtype, double scale);

// What a reduction's final block needs once its sum is complete (AVG's
// division, a scaled sum's multiplication); false for the others.
inline bool finishes_block(loom_reduce_op op) { return op == LOOM_REDUCE_AVG || op == kReduceScaledSum; }
void finish_block(loom_reduce_op op, double scale_by, int members, void *buf, size_t n, loom_dtype dtype);

using loom::cxx::dtype_name;
using loom::cxx::known_reduce_op;
const char *reduce_op_name(uint32_t op);

}  // namespace loom_ucx

#endif  // LOOM_UCX_REDUCE_H
