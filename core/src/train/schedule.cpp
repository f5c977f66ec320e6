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

Sampler::Sampler(int64_t dataset_size, int64_t batch_size, int32_t shard_index, int32_t shard_count, uint64_t seed)
    : n_(dataset_size), b_(batch_size), index_(shard_index), count_(shard_count), seed_(seed) {
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
    perm_.resize(static_cast<size_t>(n_));
    std::iota(perm_.begin(), perm_.end(), 0);
    std::mt19937_64 gen(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    for (int64_t i = n_ - 1; i > 0; --i) {
      int64_t j = static_cast<int64_t>(gen() % static_cast<uint64_t>(i + 1));
      std::swap(perm_[i], perm_[j]);
    }
    epoch_ = epoch;
  }
  const int64_t start = (u % steps_per_epoch_) * b_ * count_ + index_ * b_;
  return std::vector<int64_t>(perm_.begin() + start, perm_.begin() + start + b_);
}

}  // namespace loom::train
