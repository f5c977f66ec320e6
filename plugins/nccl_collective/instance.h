/* SPDX-License-Identifier: Apache-2.0 */
// A plugin instance (loom_collective_ctx): the host's services, the options,
// and what init learnt about the machine's CUDA devices.
#ifndef LOOM_NCCL_INSTANCE_H
#define LOOM_NCCL_INSTANCE_H

#include <atomic>
#include <cstdint>

#include "loom/collective.h"
#include "loom/cxx/errors.hpp"

struct loom_collective_ctx {
  loom_host_v1 host;           // a copy; fields beyond the host's struct_size stay zero / -1
  int64_t default_timeout_ms;  // option timeout_ms: when the comm config gives none
  int64_t watchdog_ms;         // option watchdog_ms: the watchdogs' polling interval
  int device_count = 0;        // CUDA devices visible to this process
  std::atomic<int> live_comms{0};
};

namespace loom_nccl {

// Formats one message into the host's log (dropped if the host gave no log).
using loom::cxx::host_log;

// The vtable's init, fini and last_error.
loom_status init(const loom_host_v1 *host, loom_collective_ctx **ctx, char *why, size_t why_len) noexcept;
void fini(loom_collective_ctx *ctx) noexcept;
const char *last_error(loom_collective_ctx *ctx) noexcept;

}  // namespace loom_nccl

#endif  // LOOM_NCCL_INSTANCE_H
