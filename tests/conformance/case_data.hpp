// SPDX-License-Identifier: Apache-2.0
// case_data.hpp: the inputs and exact references of the conformance cases.
//
// Every input is a deterministic function of (case seed, rank, element
// index), so each rank can compute every other rank's input and hence the
// exact expected result locally. Values are chosen so that every result is
// exact in every dtype, f16/bf16 and int8 included:
//  - sum/avg: small multiples of a unit (0.25 for floats, 1 for integers),
//    bounded so that the sum over all ranks stays exact and in range;
//  - prod: 1, -1, 2 (and 0.5 for floats), with at most as many factors of 2
//    as the dtype can hold;
//  - min/max and data movement: anything exact in the dtype;
//  - avg over floats: per element, the ranks' inputs sum to size * m, so the
//    average m is exact; over integers, sum / size truncates (C++).
//
// Thread safety: everything here is a value or a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loom/collective.h"

namespace conformance {

// Every dtype and reduce op of the ABI, in enum order.
const std::vector<loom_dtype>& all_dtypes();
const std::vector<loom_reduce_op>& all_reduce_ops();
// "f16", "bf16", ... and "sum", "prod", ...: the words used in case names.
std::string dtype_label(loom_dtype dtype);
std::string reduce_op_label(loom_reduce_op op);

// Element counts every data case runs: odd, and one past a power of two.
const std::vector<size_t>& odd_counts();

// Stores value (exact in dtype) as element i of base, and reads it back.
void store_element(loom_dtype dtype, void* base, size_t i, double value);
double load_element(loom_dtype dtype, const void* base, size_t i);

// A stable 64-bit seed for a case label (FNV-1a), equal on every rank.
uint64_t case_seed(const std::string& label);

// Inputs of one reduction case over a communicator of `size` members.
struct ReduceInputs {
  loom_dtype dtype;
  loom_reduce_op op;
  uint64_t seed;
  int size;

  // Element `index` of rank's send buffer.
  double input(int rank, size_t index) const;
  // The exact reduction of element `index` over every rank's input.
  double reference(size_t index) const;
};

// A value exact in dtype spread over its whole exact range: data movement
// payloads and min/max inputs.
double movement_value(loom_dtype dtype, uint64_t seed, int rank, size_t index);

// Where Buffers are made: host memory (the default), or CUDA managed memory
// (--device cuda, after cuda::probe succeeded). Set before any case runs.
void use_cuda_buffers(bool cuda);

// A buffer of `count` elements followed by kGuard guard elements. Every
// byte starts as this buffer's sentinel, so writes past the end and writes
// where none were allowed are both visible. Buffers made one after the other
// get different sentinels, so even copying one element too many from one
// buffer's guard into another's shows.
class Buffer {
 public:
  static constexpr size_t kGuard = 8;

  Buffer(loom_dtype dtype, size_t count);

  loom_dtype dtype() const { return dtype_; }
  uint8_t sentinel() const { return sentinel_; }
  size_t count() const { return count_; }
  // Address of element `element` (never NULL, also for count 0).
  void* data(size_t element = 0);
  const void* data(size_t element = 0) const;

  void set(size_t i, double value) { store_element(dtype_, data(), i, value); }
  double get(size_t i) const { return load_element(dtype_, data(), i); }
  // Sets elements [offset, offset + n) to value(i) for i in [0, n).
  void fill(size_t offset, size_t n, const std::function<double(size_t)>& value);

 private:
  loom_dtype dtype_;
  size_t count_;
  size_t elem_size_;
  uint8_t sentinel_;
  std::shared_ptr<uint8_t> bytes_;  // host or managed memory, freed accordingly
};

// Elements [offset, offset + n) of got equal expected(i), byte for byte in
// got's dtype; the message lists the first mismatches.
testing::AssertionResult holds(const Buffer& got, size_t offset, size_t n,
                               const std::function<double(size_t)>& expected);
// Elements [offset, offset + n) still hold the sentinel (nothing wrote there).
testing::AssertionResult untouched(const Buffer& got, size_t offset, size_t n);
// The guard elements after the payload still hold the sentinel.
testing::AssertionResult guard_intact(const Buffer& got);

}  // namespace conformance
