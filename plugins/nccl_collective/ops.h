/* SPDX-License-Identifier: Apache-2.0 */
// The operations of the vtable: each checks its arguments against
// collective.h's rules (counts, in-place and overlap, device memory) and
// enqueues the NCCL call on the communicator's stream. A count of 0
// finishes at once without NCCL.
#ifndef LOOM_NCCL_OPS_H
#define LOOM_NCCL_OPS_H

#include "loom/collective.h"

namespace loom_nccl {

// scale x the sum over the members (ABI 1.3): ncclRedOpCreatePreMulSum.
loom_status allreduce_scaled(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                             double scale, loom_request **request) noexcept;
loom_status allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                      loom_reduce_op op, loom_request **request) noexcept;
loom_status broadcast(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                      loom_request **request) noexcept;
loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept;
loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                      loom_request **request) noexcept;
loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request) noexcept;
// Grouped ncclSend / ncclRecv; in place through a stream-ordered copy of send.
loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                     loom_request **request) noexcept;
// A one-element allreduce on the communicator's scratch element.
loom_status barrier(loom_comm *comm, loom_request **request) noexcept;
loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept;
loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept;

}  // namespace loom_nccl

#endif  // LOOM_NCCL_OPS_H
