// SPDX-License-Identifier: Apache-2.0
// DLTensor checks: device, dtype, shape and layout.
#include "tensors.h"

#include <cstdio>
#include <limits>

#include "error.h"

namespace loom_ddp {
namespace {

// The Loom dtype of a DLPack float type, or 0.
loom_dtype map_dtype(DLDataType t) {
  if (t.lanes != 1) return 0;
  if (t.code == kDLFloat && t.bits == 16) return LOOM_DTYPE_F16;
  if (t.code == kDLFloat && t.bits == 32) return LOOM_DTYPE_F32;
  if (t.code == kDLFloat && t.bits == 64) return LOOM_DTYPE_F64;
  if (t.code == kDLBfloat && t.bits == 16) return LOOM_DTYPE_BF16;
  return 0;
}

}  // namespace

const char *dtype_name(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_DTYPE_F16:
      return "f16";
    case LOOM_DTYPE_BF16:
      return "bf16";
    case LOOM_DTYPE_F32:
      return "f32";
    case LOOM_DTYPE_F64:
      return "f64";
    default:
      return "unknown dtype";
  }
}

const char *device_name(DLDevice device, char *buf, size_t len) {
  if (device.device_type == kDLCPU) return "cpu";
  if (device.device_type == kDLCUDA) {
    std::snprintf(buf, len, "cuda:%d", static_cast<int>(device.device_id));
  } else {
    std::snprintf(buf, len, "DLPack device type %d:%d", static_cast<int>(device.device_type),
                  static_cast<int>(device.device_id));
  }
  return buf;
}

loom_status view_tensor(const DLTensor &t, const char *what, uint32_t index, DLDevice device, TensorRef *out) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDA) {
    char name[48];
    return fail(LOOM_ERR_UNSUPPORTED, "%s %u lives on %s, but the ddp strategy handles CPU and CUDA tensors only",
                what, index, device_name(t.device, name, sizeof name));
  }
  if (t.device.device_type != device.device_type ||
      (device.device_type != kDLCPU && t.device.device_id != device.device_id)) {
    char mine[48], expected[48];
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s %u lives on %s, not on the training state's device %s", what, index,
                device_name(t.device, mine, sizeof mine), device_name(device, expected, sizeof expected));
  }
  const loom_dtype dtype = map_dtype(t.dtype);
  if (dtype == 0)
    return fail(LOOM_ERR_UNSUPPORTED,
                "%s %u has DLPack dtype (code %u, bits %u, lanes %u); the ddp strategy averages f16, bf16, f32 and f64 "
                "tensors only",
                what, index, t.dtype.code, t.dtype.bits, t.dtype.lanes);
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr))
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s %u has ndim %d and %s shape", what, index, t.ndim, t.shape ? "a" : "no");
  uint64_t numel = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "%s %u has negative extent in dimension %d", what, index, d);
    const auto extent = static_cast<uint64_t>(t.shape[d]);
    if (extent != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / extent)
      return fail(LOOM_ERR_INVALID_ARGUMENT, "%s %u is too large", what, index);
    numel *= extent;
  }
  // Compact row-major: strides NULL, or equal to the products of the later
  // extents (dimensions of extent 1 may carry any stride, as in LibTorch).
  if (t.strides != nullptr && numel > 0) {
    int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expected)
        return fail(LOOM_ERR_INVALID_ARGUMENT,
                    "%s %u is not contiguous (dimension %d has stride %lld, a compact row-major tensor has %lld)", what,
                    index, d, static_cast<long long>(t.strides[d]), static_cast<long long>(expected));
      expected *= t.shape[d];
    }
  }
  if (numel > 0 && t.data == nullptr)
    return fail(LOOM_ERR_INVALID_ARGUMENT, "%s %u has %llu elements but no data (allocate it before setup)", what,
                index, static_cast<unsigned long long>(numel));
  out->data = numel > 0 ? static_cast<unsigned char *>(t.data) + t.byte_offset : nullptr;
  out->numel = numel;
  out->bytes = numel * loom_dtype_size(dtype);
  out->dtype = dtype;
  return LOOM_OK;
}

}  // namespace loom_ddp
