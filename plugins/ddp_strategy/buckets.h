/* SPDX-License-Identifier: Apache-2.0 */
// Gradient buckets: the gradients grouped, per dtype and in reverse
// parameter order (backward produces the last layers' gradients first, as in
// PyTorch's DDP), into flat runs of about bucket_mb MiB, each averaged by one
// allreduce.
#ifndef LOOM_DDP_BUCKETS_H
#define LOOM_DDP_BUCKETS_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensors.h"

namespace loom_ddp {

struct Bucket {
  loom_dtype dtype = 0;
  uint64_t count = 0;             // elements
  std::vector<uint32_t> members;  // parameter indices, in the order they were added
  std::vector<uint64_t> offsets;  // element offset of each member in the flat layout
  // Where the members already form one gap-free range of memory (always for
  // a bucket of one tensor), the collective works there in place and the
  // copies are skipped; else NULL and flat holds the bucket.
  unsigned char *grads_in_place = nullptr;
  unsigned char *params_in_place = nullptr;
  std::vector<unsigned char> flat;
  size_t op = 0;  // the bucket's operation in the group, while one is in flight
  // On a device there is no flat copy (the strategy cannot copy device
  // memory itself): a bucket that is not one range is reduced member by
  // member, in place, and these are the members' operations.
  std::vector<size_t> member_ops;

  uint64_t bytes() const { return count * loom_dtype_size(dtype); }
};

// Assigns every non-empty tensor to a bucket: tensors taken from the last to
// the first, each appended to the open bucket of its dtype, which is closed
// once it holds cap_bytes or more (so a tensor larger than the cap gets a
// bucket to itself). Buckets come out in the order they closed, the ones
// still open at the end last. Deterministic: equal inputs give equal buckets
// on every rank.
std::vector<Bucket> assign_buckets(const std::vector<TensorRef> &tensors, uint64_t cap_bytes);

// The start of the single gap-free range of memory the bucket's members
// occupy in tensors (in any order), or NULL when they are scattered.
unsigned char *contiguous_range(const Bucket &bucket, const std::vector<TensorRef> &tensors);

// Copies the members' data into bucket.flat, and back.
void pack(Bucket &bucket, const std::vector<TensorRef> &tensors);
void unpack(const Bucket &bucket, const std::vector<TensorRef> &tensors);

// Makes the buffers the bucket needs for the given tensors: on the host,
// flat is allocated unless both gradients and parameters can be used in
// place; on a device, never.
void prepare(Bucket &bucket, const std::vector<TensorRef> &params, const std::vector<TensorRef> &grads, bool on_device);

}  // namespace loom_ddp

#endif  // LOOM_DDP_BUCKETS_H
