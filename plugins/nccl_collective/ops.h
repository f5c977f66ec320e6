/* SPDX-License-Identifier: Apache-2.0 */
// The operations of the vtable: each checks its arguments against
// collective.h's rules (counts, in-place and overlap, device memory) and
// enqueues the NCCL call on the communicator's stream. A count of 0
// finishes at once without NCCL.
#ifndef LOOM_NCCL_OPS_H
#define LOOM_NCCL_OPS_H

#include "loom/collective.h"
#include "loom/cxx/collective.hpp"

namespace loom_nccl {

LOOM_CXX_DECLARE_COLLECTIVE_OPS();

}  // namespace loom_nccl

#endif  // LOOM_NCCL_OPS_H
