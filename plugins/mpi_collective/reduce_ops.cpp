// SPDX-License-Identifier: Apache-2.0
// MPI datatypes and reductions for every Loom dtype, including f16 and bf16.
#include "reduce_ops.h"

#include "../common/average.h"

#include "error.h"
#include "half.h"

namespace loom_mpi {
namespace {

enum HalfKind { kF16, kBF16, kHalfKinds };
enum OpIndex { kSum, kProd, kMin, kMax, kOps };

// Created once per MPI lifetime; guarded by the MPI lock.
MPI_Datatype g_half_type[kHalfKinds] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
MPI_Op g_half_op[kHalfKinds][kOps] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                                      {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};

struct F16 {
  static float load(uint16_t h) { return f16_to_float(h); }
  static uint16_t store(float f) { return float_to_f16(f); }
};
struct BF16 {
  static float load(uint16_t h) { return bf16_to_float(h); }
  static uint16_t store(float f) { return float_to_bf16(f); }
};

// MPI_User_function for 16-bit floats: inout[i] = in[i] (op) inout[i]. One
// op per (type, operation) so it never has to inspect the datatype. Min and
// max pick one operand unchanged, as MPI's own float ops do.
template <class H, OpIndex Op>
void half_reduce(void *in, void *inout, int *len, MPI_Datatype *) {
  const uint16_t *a = static_cast<const uint16_t *>(in);
  uint16_t *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = H::load(a[i]), y = H::load(b[i]);
    switch (Op) {
      case kSum: b[i] = H::store(x + y); break;
      case kProd: b[i] = H::store(x * y); break;
      case kMin: b[i] = y < x ? b[i] : a[i]; break;
      case kMax: b[i] = y > x ? b[i] : a[i]; break;
      default: break;
    }
  }
}

template <class H>
loom_status create_ops(HalfKind k) {
  MPI_User_function *fns[kOps] = {half_reduce<H, kSum>, half_reduce<H, kProd>, half_reduce<H, kMin>,
                                  half_reduce<H, kMax>};
  for (int op = 0; op < kOps; ++op) {
    int rc = MPI_Op_create(fns[op], /*commute=*/1, &g_half_op[k][op]);
    if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Op_create");
  }
  return LOOM_OK;
}

// Fills g_reductions from the current half types and ops (null handles when
// they do not exist).
void fill_reductions() {
  const MPI_Datatype types[kNumDtypes] = {MPI_DATATYPE_NULL, g_half_type[kF16], g_half_type[kBF16],
                                          MPI_FLOAT,         MPI_DOUBLE,        MPI_INT8_T,
                                          MPI_UINT8_T,       MPI_INT32_T,       MPI_INT64_T};
  const MPI_Op builtin[kOps] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  // Column of each loom_reduce_op in the op arrays (AVG is a SUM); -1: none.
  const int column[kNumReduceOps] = {-1, kSum, kProd, kMin, kMax, kSum};
  for (loom_dtype d = 0; d < kNumDtypes; ++d) {
    for (loom_reduce_op o = 0; o < kNumReduceOps; ++o) {
      Reduction &r = g_reductions[d][o];
      r.type = types[d];
      r.elem = static_cast<uint8_t>(loom_dtype_size(d));
      const int c = column[o];
      if (d == 0 || c < 0) {
        r.op = MPI_OP_NULL;
      } else if (d == LOOM_DTYPE_F16 || d == LOOM_DTYPE_BF16) {
        r.op = g_half_op[d == LOOM_DTYPE_F16 ? kF16 : kBF16][c];
      } else {
        r.op = builtin[c];
      }
      r.direct = r.op != MPI_OP_NULL && o != LOOM_REDUCE_AVG;
    }
  }
}

}  // namespace

Reduction g_reductions[kNumDtypes][kNumReduceOps] = {};

loom_status create_half_types() {
  for (int k = 0; k < kHalfKinds; ++k) {
    int rc = MPI_Type_contiguous(2, MPI_BYTE, &g_half_type[k]);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&g_half_type[k]);
    if (rc != MPI_SUCCESS) return fail_mpi(rc, "MPI_Type_contiguous for a 16-bit float type");
  }
  MPI_Type_set_name(g_half_type[kF16], const_cast<char *>("LOOM_F16"));
  MPI_Type_set_name(g_half_type[kBF16], const_cast<char *>("LOOM_BF16"));
  loom_status s = create_ops<F16>(kF16);
  if (s == LOOM_OK) s = create_ops<BF16>(kBF16);
  if (s == LOOM_OK) fill_reductions();
  return s;
}

void free_half_types() {
  for (int k = 0; k < kHalfKinds; ++k) {
    if (g_half_type[k] != MPI_DATATYPE_NULL) MPI_Type_free(&g_half_type[k]);
    for (MPI_Op &op : g_half_op[k])
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  fill_reductions();  // the half entries back to null handles
}

void divide_in_place(void *buf, uint64_t count, loom_dtype dtype, int divisor) {
  loom_plugin_common::divide_in_place(buf, count, dtype, divisor);
}

}  // namespace loom_mpi
