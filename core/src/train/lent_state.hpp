// SPDX-License-Identifier: Apache-2.0
// The C callbacks of a loom_training_state_v1 (SDK strategy.h), once, for
// any owner that lends one: the training state itself, and the host copies
// a strategy without device support gets (staging.hpp). Owner has
// snapshot_into(std::string&), restore(const char*, size_t) (throws when the
// bytes do not fit), the views its Views members return, and
// device_memory() -> DeviceMemory&, and window_loss(double*) -> bool (false:
// no loss known). fill_callbacks() sets them all.
// Internal; header-only, no LibTorch beyond device_memory.hpp's.
#pragma once

#include <string>
#include <vector>

#include "device_memory.hpp"
#include "loom/strategy.h"

namespace loom::train::lent {

template <class Owner>
loom_status snapshot(void* user, const uint8_t** data, size_t* len) {
  try {
    static thread_local std::string held;  // the ABI promises validity until the next call
    static_cast<Owner*>(user)->snapshot_into(held);  // reuses held's storage
    *data = reinterpret_cast<const uint8_t*>(held.data());
    *len = held.size();
    return LOOM_OK;
  } catch (...) {
    return LOOM_ERR_INTERNAL;
  }
}

template <class Owner>
loom_status restore(void* user, const uint8_t* data, size_t len) {
  try {
    static_cast<Owner*>(user)->restore(reinterpret_cast<const char*>(data), len);  // no copy of the state
    return LOOM_OK;
  } catch (...) {
    return LOOM_ERR_INVALID_ARGUMENT;
  }
}

template <class Owner, const std::vector<DLTensor>& (Owner::*Views)()>
loom_status lend_views(void* user, const DLTensor** tensors, uint32_t* count) {
  try {
    const auto& views = (static_cast<Owner*>(user)->*Views)();
    *tensors = views.data();
    *count = static_cast<uint32_t>(views.size());
    return LOOM_OK;
  } catch (...) {
    return LOOM_ERR_INTERNAL;
  }
}

template <class Owner>
loom_status alloc_device(void* user, size_t bytes, void** ptr) {
  return static_cast<Owner*>(user)->device_memory().alloc(bytes, ptr);
}
template <class Owner>
void free_device(void* user, void* ptr) {
  static_cast<Owner*>(user)->device_memory().free(ptr);
}
template <class Owner>
loom_status copy(void* user, void* dst, int32_t dst_on_device, const void* src, int32_t src_on_device, size_t bytes) {
  return static_cast<Owner*>(user)->device_memory().copy(dst, dst_on_device != 0, src, src_on_device != 0, bytes);
}

template <class Owner>
loom_status window_loss(void* user, double* loss) {
  return static_cast<Owner*>(user)->window_loss(loss) ? LOOM_OK : LOOM_ERR_UNAVAILABLE;
}

// Points view's callbacks at owner's members; device and stream come from
// owner.device_memory().
template <class Owner, const std::vector<DLTensor>& (Owner::*Optimizer)(),
          const std::vector<DLTensor>& (Owner::*Buffers)()>
void fill_callbacks(Owner& owner, loom_training_state_v1* view) {
  view->user = &owner;
  view->snapshot = snapshot<Owner>;
  view->restore = restore<Owner>;
  view->optimizer_state = lend_views<Owner, Optimizer>;
  view->buffers = lend_views<Owner, Buffers>;
  view->device = owner.device_memory().dl_device();
  view->stream = owner.device_memory().stream();
  view->alloc_device = alloc_device<Owner>;
  view->free_device = free_device<Owner>;
  view->copy = copy<Owner>;
  view->window_loss = window_loss<Owner>;
}

}  // namespace loom::train::lent
