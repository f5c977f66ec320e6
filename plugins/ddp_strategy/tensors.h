// The host's DLPack views, checked once at setup and reduced to what the
// strategy needs: where the bytes are, how many elements, which dtype.
#ifndef LOOM_DDP_TENSORS_H
#define LOOM_DDP_TENSORS_H

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

// Checks one tensor (CPU device, a float dtype Loom can reduce, compact
// row-major layout) and fills *out. what names it in messages ("parameter",
// "gradient"). LOOM_ERR_UNSUPPORTED for a device or dtype the strategy cannot
// handle, LOOM_ERR_INVALID_ARGUMENT for a malformed view.
loom_status view_tensor(const DLTensor &t, const char *what, uint32_t index, TensorRef *out);

// "f32", "bf16"...
const char *dtype_name(loom_dtype dtype);

}  // namespace loom_ddp

#endif  // LOOM_DDP_TENSORS_H
