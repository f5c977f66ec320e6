/* SPDX-License-Identifier: Apache-2.0 */
// The operations of the vtable: each checks its arguments against the
// header's rules (in place, overlap, counts, roots), picks the algorithm by
// size, and posts it.
#ifndef LOOM_UCX_OPS_H
#define LOOM_UCX_OPS_H

#include "loom/collective.h"
#include "loom/cxx/collective.hpp"

namespace loom_ucx {

LOOM_CXX_DECLARE_COLLECTIVE_OPS();

}  // namespace loom_ucx

#endif  // LOOM_UCX_OPS_H
