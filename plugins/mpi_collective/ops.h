/* SPDX-License-Identifier: Apache-2.0 */
// The operations of the vtable: each validates its arguments against the
// header's rules (in-place, overlap, counts), then posts the MPI_I* call, or,
// given request == NULL (LOOM_CAP_INLINE_COMPLETION), completes it before
// returning.
#ifndef LOOM_MPI_OPS_H
#define LOOM_MPI_OPS_H

#include "loom/collective.h"
#include "loom/cxx/collective.hpp"

namespace loom_mpi {

LOOM_CXX_DECLARE_COLLECTIVE_OPS();

}  // namespace loom_mpi

#endif  // LOOM_MPI_OPS_H
