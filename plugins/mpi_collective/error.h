/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message (what last_error returns)
// and the mapping of MPI error codes onto loom_status.
#ifndef LOOM_MPI_ERROR_H
#define LOOM_MPI_ERROR_H

#include <mpi.h>

#include <exception>
#include <new>

#include "loom/plugin.h"

namespace loom_mpi {

// Formats a message into the calling thread's error buffer and returns s.
loom_status fail(loom_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Records "<what> failed: <MPI_Error_string>" and returns the status for MPI
// error code rc. Call it while holding the MPI lock (it asks MPI for text).
loom_status fail_mpi(int rc, const char *what);

// The calling thread's last message; never NULL, lives until its next failure.
const char *last_error_text();

// Returns from the enclosing function when expr is not LOOM_OK.
#define LOOM_MPI_TRY(expr)                \
  do {                                    \
    const loom_status try_s_ = (expr);    \
    if (try_s_ != LOOM_OK) return try_s_; \
  } while (0)

// Runs body and turns any escaping exception into a status: nothing may
// unwind across the C ABI.
template <class Body>
loom_status guarded(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(LOOM_ERR_SYSTEM, "out of memory");
  } catch (const std::exception &e) {
    return fail(LOOM_ERR_INTERNAL, "unexpected exception: %s", e.what());
  } catch (...) {
    return fail(LOOM_ERR_INTERNAL, "unexpected exception of unknown type");
  }
}

}  // namespace loom_mpi

#endif  // LOOM_MPI_ERROR_H
