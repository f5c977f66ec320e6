// SPDX-License-Identifier: Apache-2.0
// The learning rate at a global step, and which samples a step trains on.
// Both are pure functions of the configuration, so every process (and a
// resumed run) agrees on them. No LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/train/config.hpp"

namespace loom::train {

// Linear warm-up over warmup_steps, then constant, cosine or linear decay to
// zero at max_steps.
double lr_at(const TrainerSettings& s, int64_t step);

// Sample order: each epoch is a permutation of the training set seeded by
// (seed, epoch); global micro-batch u takes the u-th slice of G = batch_size
// x shards samples, and shard `index` takes its batch_size samples of it. So
// one process with batch G sees the same samples, in the same order, as G/B
// processes with batch B.
class Sampler {
 public:
  // blocks: sizes of consecutive runs of samples kept together (a streamed
  // data set's shards, Dataset::blocks); each epoch visits the blocks in a
  // shuffled order and shuffles within each. Empty: one block.
  Sampler(int64_t dataset_size, int64_t batch_size, int32_t shard_index, int32_t shard_count, uint64_t seed,
          std::vector<int64_t> blocks = {});
  // Samples of global micro-batch u for this shard.
  std::vector<int64_t> batch(int64_t u);
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  int64_t n_, b_, index_, count_, steps_per_epoch_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
  std::vector<int64_t> blocks_;
};

}  // namespace loom::train
