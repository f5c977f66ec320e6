/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message (what last_error
// returns) and the exception guard, from the SDK's C++ layer.
#ifndef LOOM_DDP_ERROR_H
#define LOOM_DDP_ERROR_H

#include "loom/cxx/errors.hpp"

namespace loom_ddp {
using loom::cxx::fail;
using loom::cxx::guarded;
using loom::cxx::last_error_text;
}  // namespace loom_ddp

#endif  // LOOM_DDP_ERROR_H
