/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message (what last_error
// returns) and the guard that keeps exceptions from crossing the C ABI.
#ifndef LOOM_DDP_ERROR_H
#define LOOM_DDP_ERROR_H

#include <exception>
#include <new>

#include "loom/plugin.h"

namespace loom_ddp {

// Formats a message into the calling thread's error buffer and returns s.
loom_status fail(loom_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// The calling thread's last message; never NULL, lives until its next failure.
const char *last_error_text();

// Returns from the enclosing function when expr is not LOOM_OK.
#define LOOM_DDP_TRY(expr)                \
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

}  // namespace loom_ddp

#endif  // LOOM_DDP_ERROR_H
