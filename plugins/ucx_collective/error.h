/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message and the exception guard
// come from the SDK's C++ layer (loom/cxx/errors.hpp); what is UCX's own is
// the mapping of UCX statuses onto loom_status.
#ifndef LOOM_UCX_ERROR_H
#define LOOM_UCX_ERROR_H

#include <ucs/type/status.h>

#include "loom/cxx/errors.hpp"

namespace loom_ucx {

using loom::cxx::fail;
using loom::cxx::guarded;
using loom::cxx::last_error_text;

// The loom_status for a UCX failure: truncation means the ranks disagreed on
// sizes (the caller's mistake); a broken connection means a dead peer.
loom_status status_of(ucs_status_t s);

}  // namespace loom_ucx

#endif  // LOOM_UCX_ERROR_H
