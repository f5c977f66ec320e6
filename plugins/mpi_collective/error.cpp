// SPDX-License-Identifier: Apache-2.0
// Thread-local error messages and MPI error mapping.
#include "error.h"

#include <cstdarg>
#include <cstdio>

namespace loom_mpi {
namespace {
// A plain array: no constructor, no destructor registration, no allocation,
// so it is safe in a dlopen'ed object and on any thread.
thread_local char t_message[1024] = "no error";
}  // namespace

loom_status fail(loom_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_message, sizeof t_message, fmt, ap);
  va_end(ap);
  return s;
}

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

const char *last_error_text() { return t_message; }

}  // namespace loom_mpi
