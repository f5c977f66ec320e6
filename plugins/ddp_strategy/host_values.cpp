// SPDX-License-Identifier: Apache-2.0
// Host values through device scratch.
#include "host_values.h"

#include <algorithm>
#include <cstring>

#include "error.h"

namespace loom_ddp {

loom_status HostValues::open(const loom_training_state_v1 &state) {
  close();
  std::memset(&state_, 0, sizeof state_);
  std::memcpy(&state_, &state, std::min<size_t>(state.struct_size, sizeof state_));
  on_device_ = state.struct_size >= LOOM_TRAINING_STATE_V1_6_SIZE && state_.device.device_type != kDLCPU;
  if (!on_device_) return LOOM_OK;
  if (!state_.alloc_device || !state_.free_device || !state_.copy)
    return fail(LOOM_ERR_UNSUPPORTED,
                "the host lends tensors in device memory but no alloc_device, free_device and copy services (SDK "
                "ABI 1.6), which the ddp strategy needs for its small host values");
  const loom_status s = state_.alloc_device(state_.user, kScratchBytes, &scratch_);
  if (s != LOOM_OK || scratch_ == nullptr) {
    scratch_ = nullptr;
    return fail(s != LOOM_OK ? s : LOOM_ERR_INTERNAL, "the host could not give %zu bytes of device memory (%s)",
                kScratchBytes, loom_status_name(s));
  }
  return LOOM_OK;
}

void HostValues::close() {
  if (scratch_ && state_.free_device) state_.free_device(state_.user, scratch_);
  scratch_ = nullptr;
  on_device_ = false;
}

loom_status HostValues::copy(void *dst, bool dst_on_device, const void *src, bool src_on_device, size_t bytes) {
  const loom_status s = state_.copy(state_.user, dst, dst_on_device ? 1 : 0, src, src_on_device ? 1 : 0, bytes);
  if (s != LOOM_OK)
    return fail(s, "the host could not copy %zu bytes %s the device (%s)", bytes, dst_on_device ? "to" : "from",
                loom_status_name(s));
  return LOOM_OK;
}

loom_status HostValues::device_buffer(size_t bytes, void **out, void **temporary) {
  *temporary = nullptr;
  if (bytes <= kScratchBytes) {
    *out = scratch_;
    return LOOM_OK;
  }
  const loom_status s = state_.alloc_device(state_.user, bytes, temporary);
  if (s != LOOM_OK || *temporary == nullptr)
    return fail(s != LOOM_OK ? s : LOOM_ERR_INTERNAL, "the host could not give %zu bytes of device memory (%s)", bytes,
                loom_status_name(s));
  *out = *temporary;
  return LOOM_OK;
}

loom_status HostValues::allreduce(Group &group, void *buf, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                                  Clock::time_point deadline) {
  return run(group, buf, count, dtype, deadline, [&](void *at, size_t *h) { return group.allreduce(at, count, dtype, op, h); });
}

loom_status HostValues::broadcast(Group &group, void *buf, uint64_t count, loom_dtype dtype, int32_t root,
                                  Clock::time_point deadline) {
  // Every rank copies its bytes up: the root's matter, the rest are overwritten.
  return run(group, buf, count, dtype, deadline, [&](void *at, size_t *h) { return group.broadcast(at, count, dtype, root, h); });
}

}  // namespace loom_ddp
