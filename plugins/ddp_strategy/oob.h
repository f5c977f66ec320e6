/* SPDX-License-Identifier: Apache-2.0 */
// The out-of-band exchange handed to comm_create: an allgather over the
// job's rendezvous store (host store_set / store_get). Collectives that
// bootstrap themselves (mpi) never call it; those that must swap addresses
// first (ucx) do.
#ifndef LOOM_DDP_OOB_H
#define LOOM_DDP_OOB_H

#include <cstdint>
#include <string>

#include "loom/collective.h"

namespace loom_ddp {

class StoreOob {
 public:
  // host must outlive this object; rank and size are the communicator's.
  StoreOob(const loom_host_v1 *host, int32_t rank, int32_t size);
  StoreOob(const StoreOob &) = delete;
  StoreOob &operator=(const StoreOob &) = delete;

  // Lives as long as this object; pass it in loom_comm_config_v1.oob.
  const loom_oob_v1 *table() const { return &table_; }
  // What the last failed exchange said; empty when none failed.
  const std::string &error() const { return error_; }

 private:
  // loom_oob_v1.allgather. Each call takes the next number of a process-wide
  // sequence (equal on every rank, since ranks create communicators in the
  // same order), publishes send under "ddp/oob/<seq>/<rank>" and reads every
  // member's key, all within timeout_ms.
  static loom_status allgather(void *user, const void *send, size_t len, void *recv, int64_t timeout_ms) noexcept;
  loom_status run(const void *send, size_t len, void *recv, int64_t timeout_ms);
  loom_status failed(loom_status s, std::string message);

  const loom_host_v1 *host_;
  int32_t rank_;
  int32_t size_;
  loom_oob_v1 table_;
  std::string error_;
};

}  // namespace loom_ddp

#endif  // LOOM_DDP_OOB_H
