/* SPDX-License-Identifier: Apache-2.0 */
// Error reporting: the calling thread's last message and the exception guard
// come from the SDK's C++ layer (loom/cxx/errors.hpp); what is NCCL's own is
// the mapping of CUDA and NCCL results onto loom_status.
#ifndef LOOM_NCCL_ERROR_H
#define LOOM_NCCL_ERROR_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "loom/cxx/errors.hpp"

namespace loom_nccl {

using loom::cxx::fail;
using loom::cxx::guarded;
using loom::cxx::last_error_text;

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

}  // namespace loom_nccl

#endif  // LOOM_NCCL_ERROR_H
