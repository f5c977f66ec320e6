/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message (what last_error
// returns), the mapping of CUDA and NCCL results onto loom_status, and the
// guard that keeps exceptions from crossing the C ABI.
#ifndef LOOM_NCCL_ERROR_H
#define LOOM_NCCL_ERROR_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include <exception>
#include <new>

#include "loom/plugin.h"

namespace loom_nccl {

// Formats a message into the calling thread's error buffer and returns s.
loom_status fail(loom_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Records "<what>: <cudaGetErrorString>" and returns LOOM_ERR_SYSTEM. Also
// clears CUDA's last error, so the next call starts from a clean slate.
loom_status fail_cuda(cudaError_t rc, const char *what);

// Records "<what> failed: <NCCL's text>" for a result NCCL returned from the
// call itself (nothing was posted) and returns its status.
loom_status fail_nccl(ncclResult_t rc, const char *what, ncclComm_t comm);

// The communicator's asynchronous state (ncclCommGetAsyncError): ncclSuccess,
// ncclInProgress or its error; a query that itself fails gives that error.
ncclResult_t async_state(ncclComm_t comm);
// "<NCCL's text for rc>[: <its last error message>]".
std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm);

// The status of a result returned by an NCCL call: the caller's mistake
// (INVALID_ARGUMENT), a peer (PEER_FAILED), or the system.
loom_status status_of(ncclResult_t rc);

// The status of an error NCCL reports asynchronously on a communicator
// (ncclCommGetAsyncError): the network or a remote rank failing surfaces as
// ncclRemoteError or ncclSystemError, both a peer failure to the caller.
loom_status async_status_of(ncclResult_t rc);

// The calling thread's last message; never NULL, lives until its next failure.
const char *last_error_text();

// Returns from the enclosing function when expr is not LOOM_OK.
#define LOOM_NCCL_TRY(expr)               \
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

}  // namespace loom_nccl

#endif  // LOOM_NCCL_ERROR_H
