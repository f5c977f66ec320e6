// SPDX-License-Identifier: Apache-2.0
// Loom <-> NCCL dtype and op mapping; the PreMulSum scalar.
#include "types.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "../common/half_float.h"

namespace loom_nccl {

bool nccl_dtype(loom_dtype dtype, ncclDataType_t *out) {
  switch (dtype) {
    case LOOM_DTYPE_F16: *out = ncclFloat16; return true;
    case LOOM_DTYPE_BF16: *out = ncclBfloat16; return true;
    case LOOM_DTYPE_F32: *out = ncclFloat32; return true;
    case LOOM_DTYPE_F64: *out = ncclFloat64; return true;
    case LOOM_DTYPE_I8: *out = ncclInt8; return true;
    case LOOM_DTYPE_U8: *out = ncclUint8; return true;
    case LOOM_DTYPE_I32: *out = ncclInt32; return true;
    case LOOM_DTYPE_I64: *out = ncclInt64; return true;
    default: return false;
  }
}

bool nccl_op(loom_reduce_op op, ncclRedOp_t *out) {
  switch (op) {
    case LOOM_REDUCE_SUM: *out = ncclSum; return true;
    case LOOM_REDUCE_PROD: *out = ncclProd; return true;
    case LOOM_REDUCE_MIN: *out = ncclMin; return true;
    case LOOM_REDUCE_MAX: *out = ncclMax; return true;
    case LOOM_REDUCE_AVG: *out = ncclAvg; return true;
    default: return false;
  }
}

bool scale_scalar(loom_dtype dtype, double scale, Scalar *out, char *why, size_t why_len) {
  using namespace loom_plugin_common;
  std::memset(out->bytes, 0, sizeof out->bytes);
  float as_float = 0;
  switch (dtype) {
    case LOOM_DTYPE_F64: std::memcpy(out->bytes, &scale, sizeof scale); return true;
    case LOOM_DTYPE_F32: as_float = float(scale); std::memcpy(out->bytes, &as_float, sizeof as_float); break;
    case LOOM_DTYPE_F16: {
      const uint16_t h = float_to_f16(float(scale));
      std::memcpy(out->bytes, &h, sizeof h);
      as_float = f16_to_float(h);
      break;
    }
    case LOOM_DTYPE_BF16: {
      const uint16_t h = float_to_bf16(float(scale));
      std::memcpy(out->bytes, &h, sizeof h);
      as_float = bf16_to_float(h);
      break;
    }
    default: std::snprintf(why, why_len, "dtype %u has no scalar form", dtype); return false;
  }
  // NCCL multiplies in the dtype itself: a scale the dtype cannot hold would
  // turn every result into infinity or zero.
  if (std::isinf(as_float) || (as_float == 0.0f && scale != 0.0)) {
    std::snprintf(why, why_len, "allreduce_scaled: scale %g is not representable in %s (it becomes %g)", scale,
                  dtype_name(dtype), double(as_float));
    return false;
  }
  return true;
}

}  // namespace loom_nccl
