/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message (what last_error
// returns), the mapping of UCX statuses onto loom_status, and the guard that
// keeps exceptions from crossing the C ABI.
#ifndef LOOM_UCX_ERROR_H
#define LOOM_UCX_ERROR_H

#include <ucs/type/status.h>

#include <exception>
#include <new>

#include "loom/plugin.h"

namespace loom_ucx {

// Formats a message into the calling thread's error buffer and returns s.
loom_status fail(loom_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// The calling thread's last message; never NULL, lives until its next failure.
const char *last_error_text();

// The loom_status for a UCX failure: truncation means the ranks disagreed on
// sizes (the caller's mistake); a broken connection means a dead peer.
loom_status status_of(ucs_status_t s);

// Returns from the enclosing function when expr is not LOOM_OK.
#define LOOM_UCX_TRY(expr)                \
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

}  // namespace loom_ucx

#endif  // LOOM_UCX_ERROR_H
