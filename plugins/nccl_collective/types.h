/* SPDX-License-Identifier: Apache-2.0 */
// Loom's dtypes and reduce ops in NCCL's terms, and the scale of a scaled
// allreduce as the host-side scalar NCCL's PreMulSum takes.
#ifndef LOOM_NCCL_TYPES_H
#define LOOM_NCCL_TYPES_H

#include <nccl.h>

#include <cstdint>

#include "loom/collective.h"
#include "loom/cxx/checks.hpp"

namespace loom_nccl {

// NCCL's type for dtype; false for an unknown dtype. All eight Loom dtypes
// have a native NCCL type (f16 and bf16 included).
bool nccl_dtype(loom_dtype dtype, ncclDataType_t *out);

// NCCL's built-in op for op; false for an unknown op. AVG is ncclAvg for
// every dtype: NCCL pre-multiplies floats by 1/size and divides integers
// after the sum, truncating toward zero as C does (SumPostDiv), which is
// what collective.h asks of integer averages.
bool nccl_op(loom_reduce_op op, ncclRedOp_t *out);

// "f32", "bf16"... for messages; "unknown" otherwise.
using loom::cxx::dtype_name;  // "f32", ...

// The scale as one element of dtype (f16 and bf16 rounded to nearest even),
// the scalar of ncclRedOpCreatePreMulSum. False, with the reason in why,
// when the dtype cannot hold it (it overflows or flushes to zero).
struct Scalar {
  unsigned char bytes[8];
};
bool scale_scalar(loom_dtype dtype, double scale, Scalar *out, char *why, size_t why_len);

}  // namespace loom_nccl

#endif  // LOOM_NCCL_TYPES_H
