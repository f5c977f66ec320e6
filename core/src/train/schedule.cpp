// SPDX-License-Identifier: Apache-2.0
#include "schedule.hpp"

#include <cmath>
#include <numeric>
#include <random>

#include "loom/status.hpp"

namespace loom::train {

double lr_at(const TrainerSettings& s, int64_t step) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) return s.lr * double(step + 1) / double(s.warmup_steps);
  const double span = double(std::max<int64_t>(1, s.max_steps - s.warmup_steps));
  const double t = std::min(1.0, double(step - s.warmup_steps) / span);
  if (s.schedule == "cosine") return s.lr * 0.5 * (1.0 + std::cos(M_PI * t));
  if (s.schedule == "linear") return s.lr * (1.0 - t);
  return s.lr;
}

Sampler::Sampler(int64_t dataset_size, int64_t batch_size, int32_t shard_index, int32_t shard_count, uint64_t seed,
                 std::vector<int64_t> blocks)
    : n_(dataset_size), b_(batch_size), index_(shard_index), count_(shard_count), seed_(seed), blocks_(std::move(blocks)) {
  if (blocks_.empty()) blocks_.push_back(n_);
  const int64_t global = b_ * count_;
  if (global > n_) {
    throw Error::usage("batch_size " + std::to_string(b_) + " x " + std::to_string(count_) + " process(es) = " +
                       std::to_string(global) + " samples per step exceeds the training set (" + std::to_string(n_) +
                       " samples): lower trainer.batch_size");
  }
  steps_per_epoch_ = n_ / global;
}

std::vector<int64_t> Sampler::batch(int64_t u) {
  const int64_t epoch = u / steps_per_epoch_;
  if (epoch != epoch_) {
    // Fisher-Yates with an explicit generator: the same order on every
    // platform and in every process.
    std::mt19937_64 gen(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    auto shuffle = [&gen](int64_t* first, int64_t count) {
      for (int64_t i = count - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(gen() % static_cast<uint64_t>(i + 1));
        std::swap(first[i], first[j]);
      }
    };
    // The blocks' order (a single block keeps the order it always had), then
    // each block's samples.
    std::vector<int64_t> starts(blocks_.size() + 1, 0), order(blocks_.size());
    std::partial_sum(blocks_.begin(), blocks_.end(), starts.begin() + 1);
    std::iota(order.begin(), order.end(), 0);
    if (blocks_.size() > 1) shuffle(order.data(), static_cast<int64_t>(order.size()));
    perm_.resize(static_cast<size_t>(n_));
    int64_t at = 0;
    for (int64_t block : order) {
      std::iota(perm_.begin() + at, perm_.begin() + at + blocks_[block], starts[block]);
      shuffle(perm_.data() + at, blocks_[block]);
      at += blocks_[block];
    }
    epoch_ = epoch;
  }
  const int64_t start = (u % steps_per_epoch_) * b_ * count_ + index_ * b_;
  return std::vector<int64_t>(perm_.begin() + start, perm_.begin() + start + b_);
}

}  // namespace loom::train
