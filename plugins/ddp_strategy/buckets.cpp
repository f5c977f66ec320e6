// SPDX-License-Identifier: Apache-2.0
// Bucket assignment and the copies into and out of the flat buffers.
#include "buckets.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace loom_ddp {

std::vector<Bucket> assign_buckets(const std::vector<TensorRef> &tensors, uint64_t cap_bytes) {
  std::vector<Bucket> closed;
  std::vector<Bucket> open;  // at most one per dtype, in the order they were opened
  for (size_t i = tensors.size(); i-- > 0;) {
    const TensorRef &t = tensors[i];
    if (t.numel == 0) continue;  // nothing to average
    auto it = std::find_if(open.begin(), open.end(), [&](const Bucket &b) { return b.dtype == t.dtype; });
    if (it == open.end()) {
      open.emplace_back();
      it = open.end() - 1;
      it->dtype = t.dtype;
    }
    it->members.push_back(static_cast<uint32_t>(i));
    it->offsets.push_back(it->count);
    it->count += t.numel;
    if (it->bytes() >= cap_bytes) {
      closed.push_back(std::move(*it));
      open.erase(it);
    }
  }
  for (Bucket &b : open) closed.push_back(std::move(b));
  return closed;
}

unsigned char *contiguous_range(const Bucket &bucket, const std::vector<TensorRef> &tensors) {
  std::vector<std::pair<unsigned char *, uint64_t>> spans;
  spans.reserve(bucket.members.size());
  for (uint32_t m : bucket.members) spans.emplace_back(tensors[m].data, tensors[m].bytes);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first != spans[i - 1].first + spans[i - 1].second) return nullptr;
  }
  return spans.empty() ? nullptr : spans.front().first;
}

void pack(Bucket &bucket, const std::vector<TensorRef> &tensors) {
  const size_t elem = loom_dtype_size(bucket.dtype);
  for (size_t j = 0; j < bucket.members.size(); ++j) {
    const TensorRef &t = tensors[bucket.members[j]];
    std::memcpy(bucket.flat.data() + bucket.offsets[j] * elem, t.data, t.bytes);
  }
}

void unpack(const Bucket &bucket, const std::vector<TensorRef> &tensors) {
  const size_t elem = loom_dtype_size(bucket.dtype);
  for (size_t j = 0; j < bucket.members.size(); ++j) {
    const TensorRef &t = tensors[bucket.members[j]];
    std::memcpy(t.data, bucket.flat.data() + bucket.offsets[j] * elem, t.bytes);
  }
}

void prepare(Bucket &bucket, const std::vector<TensorRef> &params, const std::vector<TensorRef> &grads, bool on_device) {
  bucket.grads_in_place = contiguous_range(bucket, grads);
  bucket.params_in_place = contiguous_range(bucket, params);
  if (on_device) bucket.member_ops.resize(bucket.members.size());
  else if (!bucket.grads_in_place || !bucket.params_in_place) bucket.flat.resize(bucket.bytes());
}

}  // namespace loom_ddp
