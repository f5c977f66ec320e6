// SPDX-License-Identifier: Apache-2.0
// case_data.cpp: input generation, exact references and byte-exact checks.
#include "case_data.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <sstream>

#include "cuda_memory.hpp"

#include "half.hpp"

namespace conformance {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t seed, int rank, size_t index, uint64_t salt = 0) {
  return mix(mix(mix(seed ^ salt) + static_cast<uint64_t>(rank)) + static_cast<uint64_t>(index));
}

// A uniform integer in [lo, hi].
int64_t uniform(uint64_t h, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1u;
  return lo + static_cast<int64_t>(h % span);
}

bool is_float(loom_dtype dtype) {
  return dtype == LOOM_DTYPE_F16 || dtype == LOOM_DTYPE_BF16 || dtype == LOOM_DTYPE_F32 || dtype == LOOM_DTYPE_F64;
}

// Values are k * unit with |k| <= limit (integers: k in [lo, limit]).
double unit(loom_dtype dtype) { return is_float(dtype) ? 0.25 : 1.0; }

int64_t limit(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_DTYPE_F16: return int64_t{1} << 11;   // 11 significant bits
    case LOOM_DTYPE_BF16: return int64_t{1} << 8;   // 8 significant bits
    case LOOM_DTYPE_F32: return int64_t{1} << 24;
    case LOOM_DTYPE_F64: return int64_t{1} << 53;
    case LOOM_DTYPE_I8: return 127;
    case LOOM_DTYPE_U8: return 255;
    case LOOM_DTYPE_I32: return INT32_MAX;
    case LOOM_DTYPE_I64: return int64_t{1} << 53;  // compared through double
    default: return 0;
  }
}

int64_t lowest(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_DTYPE_U8: return 0;
    case LOOM_DTYPE_I8: return -128;
    case LOOM_DTYPE_I32: return INT32_MIN;
    default: return -limit(dtype);
  }
}

// How many factors of 2 (or 1/2) a product may hold and stay exact.
int max_twos(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_DTYPE_I8: return 6;
    case LOOM_DTYPE_U8: return 7;
    case LOOM_DTYPE_F16: return 14;
    case LOOM_DTYPE_I32: return 30;
    default: return 52;
  }
}

// Input k (in units) for sum/avg-over-integers: the sum of `size` of them fits.
int64_t small_k(loom_dtype dtype, uint64_t h, int size) {
  const int64_t bound = limit(dtype) / size;
  return uniform(h, dtype == LOOM_DTYPE_U8 ? 0 : -bound, bound);
}

}  // namespace

const std::vector<loom_dtype>& all_dtypes() {
  static const std::vector<loom_dtype> dtypes = {LOOM_DTYPE_F16, LOOM_DTYPE_BF16, LOOM_DTYPE_F32, LOOM_DTYPE_F64,
                                                 LOOM_DTYPE_I8,  LOOM_DTYPE_U8,   LOOM_DTYPE_I32, LOOM_DTYPE_I64};
  return dtypes;
}

const std::vector<loom_reduce_op>& all_reduce_ops() {
  static const std::vector<loom_reduce_op> ops = {LOOM_REDUCE_SUM, LOOM_REDUCE_PROD, LOOM_REDUCE_MIN, LOOM_REDUCE_MAX,
                                                  LOOM_REDUCE_AVG};
  return ops;
}

std::string dtype_label(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_DTYPE_F16: return "f16";
    case LOOM_DTYPE_BF16: return "bf16";
    case LOOM_DTYPE_F32: return "f32";
    case LOOM_DTYPE_F64: return "f64";
    case LOOM_DTYPE_I8: return "i8";
    case LOOM_DTYPE_U8: return "u8";
    case LOOM_DTYPE_I32: return "i32";
    case LOOM_DTYPE_I64: return "i64";
    default: return "dtype" + std::to_string(dtype);
  }
}

std::string reduce_op_label(loom_reduce_op op) {
  switch (op) {
    case LOOM_REDUCE_SUM: return "sum";
    case LOOM_REDUCE_PROD: return "prod";
    case LOOM_REDUCE_MIN: return "min";
    case LOOM_REDUCE_MAX: return "max";
    case LOOM_REDUCE_AVG: return "avg";
    default: return "op" + std::to_string(op);
  }
}

const std::vector<size_t>& odd_counts() {
  static const std::vector<size_t> counts = {1, 7, 1031};
  return counts;
}

void store_element(loom_dtype dtype, void* base, size_t i, double value) {
  auto put = [&](auto v) { std::memcpy(static_cast<uint8_t*>(base) + i * sizeof v, &v, sizeof v); };
  switch (dtype) {
    case LOOM_DTYPE_F16: put(float_to_f16(static_cast<float>(value))); break;
    case LOOM_DTYPE_BF16: put(float_to_bf16(static_cast<float>(value))); break;
    case LOOM_DTYPE_F32: put(static_cast<float>(value)); break;
    case LOOM_DTYPE_F64: put(value); break;
    case LOOM_DTYPE_I8: put(static_cast<int8_t>(value)); break;
    case LOOM_DTYPE_U8: put(static_cast<uint8_t>(value)); break;
    case LOOM_DTYPE_I32: put(static_cast<int32_t>(value)); break;
    case LOOM_DTYPE_I64: put(static_cast<int64_t>(value)); break;
    default: break;
  }
}

double load_element(loom_dtype dtype, const void* base, size_t i) {
  auto get = [&](auto v) {
    std::memcpy(&v, static_cast<const uint8_t*>(base) + i * sizeof v, sizeof v);
    return v;
  };
  switch (dtype) {
    case LOOM_DTYPE_F16: return f16_to_float(get(uint16_t{}));
    case LOOM_DTYPE_BF16: return bf16_to_float(get(uint16_t{}));
    case LOOM_DTYPE_F32: return get(float{});
    case LOOM_DTYPE_F64: return get(double{});
    case LOOM_DTYPE_I8: return get(int8_t{});
    case LOOM_DTYPE_U8: return get(uint8_t{});
    case LOOM_DTYPE_I32: return get(int32_t{});
    case LOOM_DTYPE_I64: return static_cast<double>(get(int64_t{}));
    default: return std::nan("");
  }
}

uint64_t case_seed(const std::string& label) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : label) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

double movement_value(loom_dtype dtype, uint64_t seed, int rank, size_t index) {
  return static_cast<double>(uniform(hash(seed, rank, index, 1), lowest(dtype), limit(dtype))) * unit(dtype);
}

double ReduceInputs::input(int rank, size_t index) const {
  const uint64_t h = hash(seed, rank, index);
  switch (op) {
    case LOOM_REDUCE_SUM: return static_cast<double>(small_k(dtype, h, size)) * unit(dtype);
    case LOOM_REDUCE_PROD: {
      // 1 or 2 for unsigned; 1, -1, 2 for signed integers; also 0.5 for floats.
      const int choices = dtype == LOOM_DTYPE_U8 ? 2 : is_float(dtype) ? 4 : 3;
      const int pick = static_cast<int>(h % static_cast<uint64_t>(rank < max_twos(dtype) ? choices : 2));
      static const double kFactors[] = {1.0, 2.0, -1.0, 0.5};  // ranks past max_twos: 1 or 2 -> 1 or -1
      if (rank >= max_twos(dtype)) return (pick == 1 && dtype != LOOM_DTYPE_U8) ? -1.0 : 1.0;
      return kFactors[pick];
    }
    case LOOM_REDUCE_MIN:
    case LOOM_REDUCE_MAX: return movement_value(dtype, seed, rank, index);
    case LOOM_REDUCE_AVG: {
      if (!is_float(dtype)) return static_cast<double>(small_k(dtype, h, size)) * unit(dtype);
      // m + d_rank, where the d of ranks 2j and 2j+1 cancel and an unpaired
      // last rank has d = 0: the sum is exactly size * m.
      const int64_t half_bound = limit(dtype) / (2 * size);
      const int64_t m = uniform(hash(seed, -1, index), -half_bound, half_bound);
      const int64_t d = uniform(hash(seed, rank & ~1, index, 2), -half_bound, half_bound);
      int64_t k = m;
      if ((rank & 1) == 1) k -= d;
      else if (rank + 1 < size) k += d;
      return static_cast<double>(k) * unit(dtype);
    }
    default: return 0.0;
  }
}

double ReduceInputs::reference(size_t index) const {
  double acc = input(0, index);
  for (int r = 1; r < size; ++r) {
    const double v = input(r, index);
    switch (op) {
      case LOOM_REDUCE_SUM:
      case LOOM_REDUCE_AVG: acc += v; break;
      case LOOM_REDUCE_PROD: acc *= v; break;
      case LOOM_REDUCE_MIN: acc = v < acc ? v : acc; break;
      case LOOM_REDUCE_MAX: acc = v > acc ? v : acc; break;
      default: break;
    }
  }
  if (op == LOOM_REDUCE_AVG) {
    if (is_float(dtype)) return acc / size;                      // exact by construction
    return static_cast<double>(static_cast<int64_t>(acc) / size);  // truncates toward zero
  }
  return acc;
}

namespace {
uint8_t next_sentinel() {
  static const uint8_t kSentinels[] = {0xA5, 0x5A, 0xC3, 0x3C, 0x96, 0x69, 0xE1, 0x1E};
  static std::atomic<uint32_t> next{0};
  return kSentinels[next++ % sizeof kSentinels];
}
}  // namespace

namespace {
bool g_cuda_buffers = false;
}  // namespace

void use_cuda_buffers(bool cuda) { g_cuda_buffers = cuda; }

Buffer::Buffer(loom_dtype dtype, size_t count)
    : dtype_(dtype), count_(count), elem_size_(loom_dtype_size(dtype)), sentinel_(next_sentinel()) {
  const size_t n = (count + kGuard) * elem_size_;
  if (g_cuda_buffers) {
    bytes_.reset(static_cast<uint8_t*>(cuda::alloc_managed(n)), [](uint8_t* p) { cuda::free_managed(p); });
  } else {
    bytes_.reset(new uint8_t[n], std::default_delete<uint8_t[]>());
  }
  std::memset(bytes_.get(), sentinel_, n);
}

void* Buffer::data(size_t element) { return bytes_.get() + element * elem_size_; }
const void* Buffer::data(size_t element) const { return bytes_.get() + element * elem_size_; }

void Buffer::fill(size_t offset, size_t n, const std::function<double(size_t)>& value) {
  for (size_t i = 0; i < n; ++i) set(offset + i, value(i));
}

testing::AssertionResult holds(const Buffer& got, size_t offset, size_t n,
                               const std::function<double(size_t)>& expected) {
  const size_t size = loom_dtype_size(got.dtype());
  std::vector<uint8_t> want(size);
  std::ostringstream out;
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = expected(i);
    store_element(got.dtype(), want.data(), 0, e);
    if (std::memcmp(want.data(), got.data(offset + i), size) == 0) continue;
    if (++mismatches <= 5) out << "\n  element " << i << ": expected " << e << ", got " << got.get(offset + i);
  }
  if (mismatches == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << mismatches << " of " << n << " " << dtype_label(got.dtype())
                                     << " elements differ:" << out.str();
}

testing::AssertionResult untouched(const Buffer& got, size_t offset, size_t n) {
  const size_t size = loom_dtype_size(got.dtype());
  const auto* bytes = static_cast<const uint8_t*>(got.data(offset));
  for (size_t b = 0; b < n * size; ++b) {
    if (bytes[b] != got.sentinel()) {
      const size_t element = offset + b / size;
      return testing::AssertionFailure() << "element " << element << " was written although it must stay untouched "
                                         << "(now " << got.get(element) << ")";
    }
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult guard_intact(const Buffer& got) {
  testing::AssertionResult r = untouched(got, got.count(), Buffer::kGuard);
  if (r) return r;
  return testing::AssertionFailure() << "written past the end of a " << got.count() << "-element buffer: "
                                     << r.message();
}

}  // namespace conformance
