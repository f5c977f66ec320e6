// SPDX-License-Identifier: Apache-2.0
// The UCX status mapping.
#include "error.h"

namespace loom_ucx {

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
