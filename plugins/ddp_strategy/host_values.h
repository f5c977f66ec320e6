/* SPDX-License-Identifier: Apache-2.0 */
// Values in host memory (metrics, decisions, the model check, the bytes the
// trainer broadcasts) over a group that works on device memory: copied
// into device scratch with the host's services (SDK ABI 1.6:
// alloc_device, free_device, copy), reduced or broadcast there, copied
// back. A group on the CPU works on them in place. The strategy itself
// never links a device runtime.
#ifndef LOOM_DDP_HOST_VALUES_H
#define LOOM_DDP_HOST_VALUES_H

#include <cstddef>
#include <cstdint>

#include "group.h"
#include "loom/strategy.h"

namespace loom_ddp {

class HostValues {
 public:
  HostValues() = default;
  ~HostValues() { close(); }
  HostValues(const HostValues &) = delete;
  HostValues &operator=(const HostValues &) = delete;

  // Keeps what state lends (valid until teardown) and, on a device, takes
  // the scratch memory. LOOM_ERR_UNSUPPORTED when the state is on a device
  // but the host lends no memory services.
  loom_status open(const loom_training_state_v1 &state);
  // Gives the scratch back. Idempotent.
  void close();
  bool on_device() const { return on_device_; }

  // Post and wait, on count elements at buf (host memory). A failure of
  // the group leaves it broken (group.broken()); a failed copy does not, and
  // its message is set (error.h).
  loom_status allreduce(Group &group, void *buf, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                        Clock::time_point deadline);
  loom_status broadcast(Group &group, void *buf, uint64_t count, loom_dtype dtype, int32_t root,
                        Clock::time_point deadline);

 private:
  // post(at, &op) on buf itself (host memory), or on a device copy of it
  // that is copied back once the operation ended well.
  template <class Post>
  loom_status run(Group &group, void *buf, uint64_t count, loom_dtype dtype, Clock::time_point deadline, Post &&post) {
    if (!on_device_) return group.run([&](size_t *h) { return post(buf, h); }, deadline);
    const size_t bytes = count * loom_dtype_size(dtype);
    void *dev = nullptr, *temporary = nullptr;
    loom_status s = device_buffer(bytes, &dev, &temporary);
    if (s != LOOM_OK) return s;
    s = copy(dev, true, buf, false, bytes);
    if (s == LOOM_OK) s = group.run([&](size_t *h) { return post(dev, h); }, deadline);
    if (s == LOOM_OK) s = copy(buf, false, dev, true, bytes);
    if (temporary) state_.free_device(state_.user, temporary);
    return s;
  }
  // Device memory of at least bytes: the scratch, or *temporary.
  loom_status device_buffer(size_t bytes, void **out, void **temporary);
  loom_status copy(void *dst, bool dst_on_device, const void *src, bool src_on_device, size_t bytes);

  static constexpr size_t kScratchBytes = 256;
  loom_training_state_v1 state_{};
  bool on_device_ = false;
  void *scratch_ = nullptr;
};

}  // namespace loom_ddp

#endif  // LOOM_DDP_HOST_VALUES_H
