// SPDX-License-Identifier: Apache-2.0
// The ddp harness's fake models: DLTensors over plain arrays in four dtypes,
// with shapes, strides and offsets a real model may have, and values whose
// sums over up to 4 ranks are exact in each dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loom/collective.h"
#include "loom/strategy.h"

namespace ddp_fake {

struct Spec {
  loom_dtype dtype = LOOM_DTYPE_F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: NULL
  uint64_t byte_offset = 0;
  int device = kDLCPU;
  DLDataType raw{};  // when bits != 0: this DLPack dtype instead of dtype's
};

struct Model {
  std::vector<Spec> specs;
  std::vector<std::vector<int64_t>> shapes, strides;
  std::vector<std::vector<unsigned char>> storage;  // every allocation
  std::vector<DLTensor> params, grads;
  loom_training_state_v1 state{};

  size_t size() const { return specs.size(); }
  uint64_t numel(size_t i) const {
    uint64_t n = 1;
    for (int64_t e : specs[i].shape) n *= uint64_t(e);
    return n;
  }
};

size_t elem_size(loom_dtype d);
DLDataType dl_dtype(loom_dtype d);
unsigned char *at(const DLTensor &t, uint64_t j, loom_dtype d);
// Element j of t, as a double, and its store (rounded to d).
double get(const DLTensor &t, loom_dtype d, uint64_t j);
void put(const DLTensor &t, loom_dtype d, uint64_t j, double v);
// v as d stores it.
double rounded(loom_dtype d, double v);
// A model of these tensors; with flat_grads the gradients are one range.
std::unique_ptr<Model> make_model(const std::vector<Spec> &specs, bool flat_grads);
// Many shapes, four dtypes, an empty tensor, a scalar, explicit strides, an
// extent-1 dimension with an odd stride, and a byte_offset.
std::vector<Spec> mixed_specs();
uint64_t mix(uint64_t a, uint64_t b, uint64_t c);
double grad_value(loom_dtype d, size_t i, uint64_t j, int rank, int step);
double param_value(loom_dtype d, size_t i, uint64_t j, int rank);
void fill_params(Model &m, int rank);
void fill_grads(Model &m, int rank, int step);

}  // namespace ddp_fake
