// Loom dtypes and reduce ops as MPI datatypes and MPI_Ops. Open MPI 4.1 has no
// 16-bit float types and no average: halves travel as a 2-byte contiguous type
// reduced by user ops (convert to float, reduce, round back to nearest even),
// and AVG is a SUM divided by the communicator size after completion.
#ifndef LOOM_MPI_REDUCE_OPS_H
#define LOOM_MPI_REDUCE_OPS_H

#include <mpi.h>

#include <cstdint>

#include "loom/collective.h"

namespace loom_mpi {

// Creates (and frees) the half types and ops; call with the MPI lock held,
// after MPI_Init and before MPI_Finalize.
loom_status create_half_types();
void free_half_types();

// The MPI datatype for dtype, or MPI_DATATYPE_NULL for an unknown dtype.
MPI_Datatype mpi_datatype(loom_dtype dtype);

// The MPI_Op that reduces dtype with op (AVG maps to the SUM op), or
// MPI_OP_NULL for an unknown op.
MPI_Op mpi_op(loom_dtype dtype, loom_reduce_op op);

// Divides count elements of dtype at buf by divisor (AVG after SUM): integer
// division for integer types, float division rounded back for halves.
void divide_in_place(void *buf, uint64_t count, loom_dtype dtype, int divisor);

const char *dtype_name(loom_dtype dtype);
const char *reduce_op_name(loom_reduce_op op);

}  // namespace loom_mpi

#endif  // LOOM_MPI_REDUCE_OPS_H
