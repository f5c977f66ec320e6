// SPDX-License-Identifier: Apache-2.0
// Thread-local error messages and the UCX status mapping.
#include "error.h"

#include <cstdarg>
#include <cstdio>

namespace loom_ucx {
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

const char *last_error_text() { return t_message; }

loom_status status_of(ucs_status_t s) {
  switch (s) {
    case UCS_OK: return LOOM_OK;
    case UCS_ERR_MESSAGE_TRUNCATED: return LOOM_ERR_INVALID_ARGUMENT;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT: return LOOM_ERR_PEER_FAILED;  // UCX gave up on the peer
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:  // requests of a failed endpoint are cancelled
    case UCS_ERR_IO_ERROR: return LOOM_ERR_PEER_FAILED;
    case UCS_ERR_NO_MEMORY: return LOOM_ERR_SYSTEM;
    default: return LOOM_ERR_SYSTEM;
  }
}

}  // namespace loom_ucx
