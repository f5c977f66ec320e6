/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message and the exception guard
// come from the SDK's C++ layer (loom/cxx/errors.hpp); what is MPI's own is
// the mapping of MPI error codes onto loom_status.
#ifndef LOOM_MPI_ERROR_H
#define LOOM_MPI_ERROR_H

#include <mpi.h>

#include "loom/cxx/errors.hpp"

namespace loom_mpi {

using loom::cxx::fail;
using loom::cxx::guarded;
using loom::cxx::last_error_text;

// Records "<what> failed: <MPI_Error_string>" and returns the status for MPI
// error code rc. Call it while holding the MPI lock (it asks MPI for text).
loom_status fail_mpi(int rc, const char *what);

}  // namespace loom_mpi

#endif  // LOOM_MPI_ERROR_H
