// SPDX-License-Identifier: Apache-2.0
// The CUDA / NCCL result mapping.
#include "error.h"

namespace loom_nccl {

loom_status fail_cuda(cudaError_t rc, const char *what) {
  cudaGetLastError();  // non-sticky errors would otherwise show up in the next call's check
  return fail(LOOM_ERR_SYSTEM, "%s: %s (%s)", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

loom_status status_of(ncclResult_t rc) {
  switch (rc) {
    case ncclSuccess:
    case ncclInProgress: return LOOM_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return LOOM_ERR_INVALID_ARGUMENT;
    case ncclRemoteError: return LOOM_ERR_PEER_FAILED;
    case ncclInternalError: return LOOM_ERR_INTERNAL;
    default: return LOOM_ERR_SYSTEM;  // ncclUnhandledCudaError, ncclSystemError
  }
}

loom_status async_status_of(ncclResult_t rc) {
  switch (rc) {
    case ncclSuccess:
    case ncclInProgress: return LOOM_OK;
    case ncclRemoteError:
    case ncclSystemError: return LOOM_ERR_PEER_FAILED;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return LOOM_ERR_INVALID_ARGUMENT;  // e.g. ranks out of step
    default: return LOOM_ERR_SYSTEM;
  }
}

ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
  return rc != ncclSuccess ? rc : state;
}

std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm) {
  const char *detail = ncclGetLastError(comm);
  std::string text = ncclGetErrorString(rc);
  if (detail && *detail) text += std::string(": ") + detail;
  return text;
}

loom_status fail_nccl(ncclResult_t rc, const char *what, ncclComm_t comm) {
  return fail(status_of(rc), "%s failed: %s", what, nccl_error_text(rc, comm).c_str());
}

}  // namespace loom_nccl
