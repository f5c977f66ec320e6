#include "divide.h"

namespace loom_ddp {
namespace {

// Blocks of a fixed width: GCC vectorizes a loop of known trip count at -O2
// (its "very cheap" cost model), where the plain loop stays scalar.
template <class T>
void divide(T *p, uint64_t count, T d) {
  constexpr uint64_t kBlock = 16;
  uint64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (uint64_t j = 0; j < kBlock; ++j) p[i + j] /= d;
  }
  for (; i < count; ++i) p[i] /= d;
}

}  // namespace

bool divides_here(loom_dtype dtype) { return dtype == LOOM_DTYPE_F32 || dtype == LOOM_DTYPE_F64; }

void divide_in_place(void *data, uint64_t count, loom_dtype dtype, int32_t divisor) {
  if (dtype == LOOM_DTYPE_F32) divide(static_cast<float *>(data), count, static_cast<float>(divisor));
  if (dtype == LOOM_DTYPE_F64) divide(static_cast<double *>(data), count, static_cast<double>(divisor));
}

}  // namespace loom_ddp
