/* SPDX-License-Identifier: Apache-2.0 */
// The operations of the vtable: each checks its arguments against the
// header's rules (in place, overlap, counts, roots), picks the algorithm by
// size, and posts it.
#ifndef LOOM_UCX_OPS_H
#define LOOM_UCX_OPS_H

#include "loom/collective.h"

namespace loom_ucx {

loom_status allreduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                      loom_reduce_op op, loom_request **request) noexcept;
// scale x the sum over the members (ABI 1.3), floating dtypes only.
loom_status allreduce_scaled(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                             double scale, loom_request **request) noexcept;
loom_status broadcast(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, int32_t root,
                      loom_request **request) noexcept;
loom_status reduce(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                   int32_t root, loom_request **request) noexcept;
loom_status allgather(loom_comm *comm, const void *send, void *recv, uint64_t sendcount, loom_dtype dtype,
                      loom_request **request) noexcept;
loom_status reduce_scatter(loom_comm *comm, const void *send, void *recv, uint64_t recvcount, loom_dtype dtype,
                           loom_reduce_op op, loom_request **request) noexcept;
loom_status alltoall(loom_comm *comm, const void *send, void *recv, uint64_t count, loom_dtype dtype,
                     loom_request **request) noexcept;
loom_status barrier(loom_comm *comm, loom_request **request) noexcept;
loom_status send(loom_comm *comm, const void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept;
loom_status recv(loom_comm *comm, void *buf, uint64_t count, loom_dtype dtype, int32_t peer,
                 loom_request **request) noexcept;

}  // namespace loom_ucx

#endif  // LOOM_UCX_OPS_H
