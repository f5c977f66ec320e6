/* SPDX-License-Identifier: Apache-2.0 */
// test / wait / request_free.
#ifndef LOOM_UCX_REQUEST_H
#define LOOM_UCX_REQUEST_H

#include "loom/collective.h"

namespace loom_ucx {

loom_status test(loom_request *request, int32_t *done) noexcept;
loom_status wait(loom_request *request, int64_t timeout_ms) noexcept;
void request_free(loom_request *request) noexcept;

}  // namespace loom_ucx

#endif  // LOOM_UCX_REQUEST_H
