/* SPDX-License-Identifier: Apache-2.0 */
// Loom dtypes and reduce ops as MPI datatypes and MPI_Ops. Open MPI 4.1 has no
// 16-bit float types and no average: halves travel as a 2-byte contiguous type
// reduced by user ops (convert to float, reduce, round back to nearest even),
// and AVG is a SUM divided by the communicator size after completion.
#ifndef LOOM_MPI_REDUCE_OPS_H
#define LOOM_MPI_REDUCE_OPS_H

#include <mpi.h>

#include <cstdint>

#include "loom/collective.h"
#include "loom/cxx/checks.hpp"

namespace loom_mpi {

// Creates (and frees) the half types and ops, and fills (and clears) the
// reduction table with them; call with the MPI lock held, after MPI_Init and
// before MPI_Finalize.
loom_status create_half_types();
void free_half_types();

// A (dtype, op) pair as MPI sees it. The operations look the pair up once,
// in a table built at init, rather than mapping dtype and op by two switches
// on every call (the 1-float allreduce is dominated by such fixed costs).
struct Reduction {
  MPI_Datatype type;  // MPI_DATATYPE_NULL for an unknown dtype
  MPI_Op op;          // MPI_OP_NULL for an unknown dtype or op; AVG: the SUM op
  uint8_t elem;       // element size in bytes; 0 for an unknown dtype
  // Known dtype and op, and MPI's result is final (not AVG): nothing is left
  // to do after the MPI call, so the allreduce fast path may take it.
  bool direct;
};

// Indexed by loom_dtype and loom_reduce_op; row and column 0 (no dtype, no
// op) stay null, so [dtype][0] gives a dtype's MPI type alone. Written by
// create_half_types and free_half_types, when no communicator exists; read
// without a lock by the operations.
constexpr uint32_t kNumDtypes = LOOM_DTYPE_I64 + 1;
constexpr uint32_t kNumReduceOps = LOOM_REDUCE_AVG + 1;
// Hidden, like everything in a plugin but its entry point (and then reached
// without a GOT load).
extern __attribute__((visibility("hidden"))) Reduction g_reductions[kNumDtypes][kNumReduceOps];

// The entry for (dtype, op); the null entry when either is out of range.
inline const Reduction &reduction(loom_dtype dtype, loom_reduce_op op) {
  return dtype < kNumDtypes && op < kNumReduceOps ? g_reductions[dtype][op] : g_reductions[0][0];
}

// The MPI datatype for dtype, or MPI_DATATYPE_NULL for an unknown dtype.
inline MPI_Datatype mpi_datatype(loom_dtype dtype) { return reduction(dtype, 0).type; }

// The MPI_Op that reduces dtype with op (AVG maps to the SUM op), or
// MPI_OP_NULL for an unknown dtype or op.
inline MPI_Op mpi_op(loom_dtype dtype, loom_reduce_op op) { return reduction(dtype, op).op; }

// Divides count elements of dtype at buf by divisor (AVG after SUM): integer
// division for integer types, float division rounded back for halves.
void divide_in_place(void *buf, uint64_t count, loom_dtype dtype, int divisor);

using loom::cxx::dtype_name;
using loom::cxx::reduce_op_name;

}  // namespace loom_mpi

#endif  // LOOM_MPI_REDUCE_OPS_H
