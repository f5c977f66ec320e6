/* SPDX-License-Identifier: Apache-2.0 */
// The collective plugin instance, opened by name through the host, and the
// one communicator the strategy runs on: posting, waiting against a
// deadline, and what a failure leaves behind.
//
// Every operation is posted non-blocking and gets an index; wait(index,
// deadline) finishes and frees it. An operation larger than the collective's
// element-count limit is split into several requests under one index.
// A failed post or wait leaves the group broken: the communicator is
// aborted (the ranks are no longer in step), every pending request freed,
// and each later call answers with the first failure. One thread at a time.
#ifndef LOOM_DDP_GROUP_H
#define LOOM_DDP_GROUP_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/collective.h"
#include "loom/strategy.h"
#include "oob.h"

namespace loom_ddp {

using Clock = std::chrono::steady_clock;

// The deadline timeout_ms from now, capped so huge timeouts cannot overflow.
Clock::time_point deadline_after(int64_t timeout_ms);

class Group {
 public:
  Group() = default;
  ~Group() { close(); }
  Group(const Group &) = delete;
  Group &operator=(const Group &) = delete;

  // Opens collective plugin name through host and creates the communicator
  // (rank, size) with the store-backed out-of-band exchange, for buffers on
  // device (the CPU, or a CUDA device with the host's stream); blocking,
  // collective over the ranks, bounded by timeout_ms. On failure the message
  // (last_error) says why and nothing stays open.
  loom_status open(const loom_host_v1 *host, const char *name, int32_t rank, int32_t size, int64_t timeout_ms,
                   DLDevice device, void *stream);
  // Frees what is pending (aborting first), destroys the communicator and
  // closes the plugin. Idempotent.
  loom_status close();

  bool is_open() const { return comm_ != nullptr; }
  int32_t size() const { return size_; }
  const std::string &name() const { return name_; }
  // LOOM_OK, or the status of the failure that broke the group.
  loom_status broken() const { return broken_; }
  // That failure's message (the collective's own words), empty if none.
  const std::string &detail() const { return detail_; }

  // Post one operation in place on buf; *op receives its index.
  loom_status allreduce(void *buf, uint64_t count, loom_dtype dtype, loom_reduce_op reduce, size_t *op);
  loom_status broadcast(void *buf, uint64_t count, loom_dtype dtype, int32_t root, size_t *op);
  loom_status barrier(size_t *op);
  // Waits for operation op until deadline, then frees it.
  loom_status wait(size_t op, Clock::time_point deadline);
  // Post then wait, for one operation.
  template <class Post>
  loom_status run(Post &&post, Clock::time_point deadline) {
    size_t op = 0;
    loom_status s = post(&op);
    return s != LOOM_OK ? s : wait(op, deadline);
  }

 private:
  template <class PostOne>
  loom_status post_chunked(uint64_t count, size_t elem, PostOne &&post_one, size_t *op);
  loom_status check_usable(size_t *op);
  // Records the collective's message for status s, aborts the communicator
  // and frees every pending request; returns s.
  loom_status break_group(loom_status s);
  void free_all();

  const loom_host_v1 *host_ = nullptr;
  const loom_collective_v1 *vt_ = nullptr;
  loom_collective_ctx *instance_ = nullptr;
  loom_comm *comm_ = nullptr;
  std::unique_ptr<StoreOob> oob_;            // for hosts older than 1.7
  const loom_oob_v1 *host_oob_ = nullptr;  // the host's (oob_open), closed in close()
  bool comm_errors_ = false;               // the collective has comm_last_error (ABI 1.7)
  std::string name_;
  int32_t size_ = 0;
  loom_status broken_ = LOOM_OK;
  std::string detail_;
  // Operations in flight: ops_[i] lists the requests of operation i.
  std::vector<std::vector<loom_request *>> ops_;
  size_t pending_ = 0;  // requests not yet freed
};

}  // namespace loom_ddp

#endif  // LOOM_DDP_GROUP_H
