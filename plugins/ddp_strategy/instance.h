/* SPDX-License-Identifier: Apache-2.0 */
// A strategy instance (loom_strategy_ctx): the options, the training state
// the host lent at setup, the buckets, and the group it averages over.
#ifndef LOOM_DDP_INSTANCE_H
#define LOOM_DDP_INSTANCE_H

#include <cstdint>
#include <string>
#include <vector>

#include "buckets.h"
#include "group.h"
#include "host_values.h"
#include "loom/cxx/errors.hpp"
#include "loom/strategy.h"
#include "tensors.h"

struct loom_strategy_ctx {
  loom_host_v1 host;       // a copy; fields beyond the host's struct_size stay zero / -1
  std::string collective;  // option collective
  double bucket_mb = 25;   // option bucket_mb
  int64_t timeout_ms = 0;  // option timeout_ms
  int32_t rank = 0;        // from the host's job
  int32_t size = 1;

  // From setup to teardown.
  bool set_up = false;
  loom_training_state_v1 state{};  // a copy of what the host filled in
  std::vector<loom_ddp::TensorRef> params, grads;
  std::vector<loom_ddp::Bucket> buckets;
  uint64_t bucketed_bytes = 0;  // gradient bytes averaged per step
  loom_ddp::Group group;
  loom_ddp::HostValues values;       // host values over the group (on a device: through device scratch)
  DLDevice device{kDLCPU, 0};        // where the lent tensors live (SDK ABI 1.6; the CPU before)
  int64_t step = 0;     // global step: start_step plus the optimizer steps taken
  std::string failure;  // set when an operation failed and aborted the group
  std::string status;   // status_line's buffer
};

namespace loom_ddp {

// Formats one message into the host's log (dropped if the host gave no log).
using loom::cxx::host_log;

// LOOM_OK when the group is set up and unbroken; else a message naming call.
loom_status usable(loom_strategy_ctx *ctx, const char *call);

// Records that what (e.g. "allreduce of gradient bucket 2 of 3 (...)") failed
// with status s on the group, as the message of this and every later call.
loom_status op_failed(loom_strategy_ctx *ctx, loom_status s, const std::string &what);
// What a HostValues call's failure s means: the group's (op_failed) when it
// broke the group, else a failed copy whose message is already set.
loom_status failed_on(loom_strategy_ctx *ctx, loom_status s, const std::string &what);

// "gradient bucket 2 of 3 (f32, 1.50 MiB, 4 tensors of parameters 4..7)"
// for bucket k; kind is "gradient" or "parameter".
std::string describe_bucket(const loom_strategy_ctx *ctx, size_t k, const char *kind);

// "25.0 MiB", "0.001 MiB": the bucket size as the user wrote it, for messages.
std::string bucket_size_text(double bucket_mb);

// The vtable's lifecycle and read-only functions.
loom_status init(const loom_host_v1 *host, loom_strategy_ctx **ctx, char *why, size_t why_len) noexcept;
void fini(loom_strategy_ctx *ctx) noexcept;
const char *last_error(loom_strategy_ctx *ctx) noexcept;
loom_status data_shard(loom_strategy_ctx *ctx, int32_t *index, int32_t *count) noexcept;
int32_t is_global_zero(loom_strategy_ctx *ctx) noexcept;
int64_t global_step(loom_strategy_ctx *ctx) noexcept;
int32_t should_stop(loom_strategy_ctx *ctx) noexcept;
const char *status_line(loom_strategy_ctx *ctx) noexcept;

// setup.cpp
loom_status setup(loom_strategy_ctx *ctx, const loom_training_state_v1 *state) noexcept;
loom_status teardown(loom_strategy_ctx *ctx) noexcept;
// Undoes setup: closes the group and drops the buckets; status of comm_destroy.
loom_status release(loom_strategy_ctx *ctx);

// hooks.cpp
loom_status after_backward(loom_strategy_ctx *ctx, uint64_t local_samples, loom_step_decision *decision) noexcept;
loom_status after_optimizer_step(loom_strategy_ctx *ctx) noexcept;
loom_status reduce_metric(loom_strategy_ctx *ctx, double *value, loom_metric_op op) noexcept;
loom_status reduce_decision(loom_strategy_ctx *ctx, int32_t *decision, int32_t all) noexcept;
loom_status barrier(loom_strategy_ctx *ctx) noexcept;
loom_status broadcast_bytes(loom_strategy_ctx *ctx, void *data, uint64_t len, int32_t root) noexcept;

}  // namespace loom_ddp

#endif  // LOOM_DDP_INSTANCE_H
