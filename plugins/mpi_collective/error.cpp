// SPDX-License-Identifier: Apache-2.0
// The MPI error mapping.
#include "error.h"

namespace loom_mpi {

loom_status fail_mpi(int rc, const char *what) {
  char text[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int len = 0, cls = rc;
  MPI_Error_string(rc, text, &len);
  MPI_Error_class(rc, &cls);
  // A truncated message means the ranks disagreed on counts or types: the
  // caller's mistake, not the system's.
  loom_status s = cls == MPI_ERR_TRUNCATE ? LOOM_ERR_INVALID_ARGUMENT : LOOM_ERR_SYSTEM;
  return fail(s, "%s failed: %s (MPI error class %d)", what, text, cls);
}

}  // namespace loom_mpi
