/* SPDX-License-Identifier: Apache-2.0 */
// The host's DLPack views, checked once at setup and reduced to what the
// strategy needs: where the bytes are, how many elements, which dtype.
#ifndef LOOM_DDP_TENSORS_H
#define LOOM_DDP_TENSORS_H

#include <cstddef>
#include <cstdint>

#include "loom/collective.h"
#include "loom/strategy.h"

namespace loom_ddp {

struct TensorRef {
  unsigned char *data = nullptr;  // data + byte_offset; NULL only when numel == 0
  uint64_t numel = 0;
  uint64_t bytes = 0;
  loom_dtype dtype = 0;
};

// Checks one tensor (on device, which is the host's CPU or one CUDA device;
// a float dtype Loom can reduce; compact row-major layout) and fills *out.
// what names it in messages ("parameter", "gradient").
// LOOM_ERR_UNSUPPORTED for a device or dtype the strategy cannot handle,
// LOOM_ERR_INVALID_ARGUMENT for a malformed view or one on another device.
loom_status view_tensor(const DLTensor &t, const char *what, uint32_t index, DLDevice device, TensorRef *out);

// "cpu", "cuda:1", "DLPack device type 9:0".
const char *device_name(DLDevice device, char *buf, size_t len);

// "f32", "bf16"...
const char *dtype_name(loom_dtype dtype);

}  // namespace loom_ddp

#endif  // LOOM_DDP_TENSORS_H
