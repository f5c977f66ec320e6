// SPDX-License-Identifier: Apache-2.0
#include "fake_model.hpp"

#include <cmath>
#include <cstring>
#include <map>

#include "half_float.h"

namespace ddp_fake {



size_t elem_size(loom_dtype d) { return loom_dtype_size(d); }

DLDataType dl_dtype(loom_dtype d) {
  switch (d) {
    case LOOM_DTYPE_F16:
      return {kDLFloat, 16, 1};
    case LOOM_DTYPE_BF16:
      return {kDLBfloat, 16, 1};
    case LOOM_DTYPE_F64:
      return {kDLFloat, 64, 1};
    default:
      return {kDLFloat, 32, 1};
  }
}


unsigned char *at(const DLTensor &t, uint64_t j, loom_dtype d) {
  return static_cast<unsigned char *>(t.data) + t.byte_offset + j * elem_size(d);
}
double get(const DLTensor &t, loom_dtype d, uint64_t j) {
  unsigned char *p = at(t, j, d);
  float f;
  double x;
  uint16_t h;
  switch (d) {
    case LOOM_DTYPE_F32:
      std::memcpy(&f, p, 4);
      return f;
    case LOOM_DTYPE_F64:
      std::memcpy(&x, p, 8);
      return x;
    case LOOM_DTYPE_F16:
      std::memcpy(&h, p, 2);
      return loom_plugin_common::f16_to_float(h);
    default:
      std::memcpy(&h, p, 2);
      return loom_plugin_common::bf16_to_float(h);
  }
}
void put(const DLTensor &t, loom_dtype d, uint64_t j, double v) {
  unsigned char *p = at(t, j, d);
  float f = float(v);
  uint16_t h;
  switch (d) {
    case LOOM_DTYPE_F32:
      std::memcpy(p, &f, 4);
      break;
    case LOOM_DTYPE_F64:
      std::memcpy(p, &v, 8);
      break;
    case LOOM_DTYPE_F16:
      h = loom_plugin_common::float_to_f16(f);
      std::memcpy(p, &h, 2);
      break;
    default:
      h = loom_plugin_common::float_to_bf16(f);
      std::memcpy(p, &h, 2);
      break;
  }
}
// v as stored in dtype d.
double rounded(loom_dtype d, double v) {
  switch (d) {
    case LOOM_DTYPE_F32:
      return float(v);
    case LOOM_DTYPE_F64:
      return v;
    case LOOM_DTYPE_F16:
      return loom_plugin_common::f16_to_float(loom_plugin_common::float_to_f16(float(v)));
    default:
      return loom_plugin_common::bf16_to_float(loom_plugin_common::float_to_bf16(float(v)));
  }
}

// flat_grads: each dtype's gradients in one arena, back to back in parameter
// order (as a trainer with flattened gradient storage would lend them).
std::unique_ptr<Model> make_model(const std::vector<Spec> &specs, bool flat_grads) {
  auto m = std::make_unique<Model>();
  m->specs = specs;
  const size_t n = specs.size();
  m->shapes.resize(n);
  m->strides.resize(n);
  m->params.resize(n);
  m->grads.resize(n);
  std::map<loom_dtype, size_t> arena_bytes, arena_index;
  if (flat_grads) {
    for (size_t i = 0; i < n; ++i) arena_bytes[specs[i].dtype] += m->numel(i) * elem_size(specs[i].dtype);
    for (auto &[d, bytes] : arena_bytes) {
      arena_index[d] = m->storage.size();
      m->storage.emplace_back(bytes);
    }
  }
  std::map<loom_dtype, size_t> arena_used;
  for (size_t i = 0; i < n; ++i) {
    const Spec &s = specs[i];
    m->shapes[i] = s.shape;
    m->strides[i] = s.strides;
    const size_t bytes = m->numel(i) * elem_size(s.dtype);
    for (DLTensor *t : {&m->params[i], &m->grads[i]}) {
      t->device = {static_cast<DLDeviceType>(s.device), 0};
      t->ndim = int(s.shape.size());
      t->dtype = s.raw.bits ? s.raw : dl_dtype(s.dtype);
      t->shape = s.shape.empty() ? nullptr : m->shapes[i].data();
      t->strides = s.strides.empty() ? nullptr : m->strides[i].data();
    }
    m->storage.emplace_back(bytes + s.byte_offset + 8);
    m->params[i].data = m->storage.back().data();
    m->params[i].byte_offset = s.byte_offset;
    if (flat_grads) {
      m->grads[i].data = m->storage[arena_index[s.dtype]].data() + arena_used[s.dtype];
      arena_used[s.dtype] += bytes;
    } else {
      m->storage.emplace_back(bytes + s.byte_offset + 8);
      m->grads[i].data = m->storage.back().data();
      m->grads[i].byte_offset = s.byte_offset;
    }
  }
  m->state.struct_size = sizeof m->state;
  m->state.num_params = uint32_t(n);
  m->state.params = m->params.data();
  m->state.grads = m->grads.data();
  m->state.batch_size = 8;
  m->state.start_step = 0;
  return m;
}

// Many shapes, four dtypes, an empty tensor, a scalar, explicit strides, an
// extent-1 dimension with an odd stride, and a byte_offset.
std::vector<Spec> mixed_specs() {
  std::vector<Spec> s(11);
  s[0].shape = {64, 32};
  s[1].shape = {32};
  s[2] = {LOOM_DTYPE_F64, {16, 8}, {}, 0, kDLCPU, {}};
  s[3].shape = {10, 64};
  s[3].strides = {64, 1};
  s[4] = {LOOM_DTYPE_F16, {40}, {}, 0, kDLCPU, {}};
  s[5] = {LOOM_DTYPE_BF16, {24}, {}, 0, kDLCPU, {}};
  s[6].shape = {0, 5};
  s[7].shape = {};
  s[8].shape = {3, 1, 7};
  s[8].strides = {7, 999, 1};
  s[9].shape = {1000};
  s[9].byte_offset = 64;
  s[10] = {LOOM_DTYPE_F64, {5}, {}, 0, kDLCPU, {}};
  return s;
}

uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h =
      a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^ c * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}
// Values whose sums over up to 4 ranks are exact in each dtype.
double grad_value(loom_dtype d, size_t i, uint64_t j, int rank, int step) {
  const uint64_t h = mix(i, j, uint64_t(step) + 1000);
  switch (d) {
    case LOOM_DTYPE_F16:
      return (int(h % 201) - 100) / 8.0 * (rank + 1);
    case LOOM_DTYPE_BF16:
      return (int(h % 17) - 8) / 4.0 * (rank + 1);
    default:
      return (int(h % 2001) - 1000) / 64.0 * (rank + 1);
  }
}
double param_value(loom_dtype d, size_t i, uint64_t j, int rank) {
  return rounded(d, (int(mix(i, j, 7) % 200) - 100) / 16.0 + rank * 3.0);
}

void fill_params(Model &m, int rank) {
  for (size_t i = 0; i < m.size(); ++i)
    for (uint64_t j = 0; j < m.numel(i); ++j)
      put(m.params[i], m.specs[i].dtype, j, param_value(m.specs[i].dtype, i, j, rank));
}
void fill_grads(Model &m, int rank, int step) {
  for (size_t i = 0; i < m.size(); ++i)
    for (uint64_t j = 0; j < m.numel(i); ++j)
      put(m.grads[i], m.specs[i].dtype, j, grad_value(m.specs[i].dtype, i, j, rank, step));
}

}  // namespace ddp_fake
