// SPDX-License-Identifier: Apache-2.0
// The optimizer's per-parameter state as TrainingState reads and writes it
// (state.cpp, state_format.cpp): finding a parameter's entry across
// LibTorch versions, its floating-point statistics, its step counter.
// Internal; includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace loom::train::detail {

// LibTorch keys an optimizer's per-parameter state by the parameter's
// TensorImpl: as its address in text up to 2.0, as the address since.
template <class Map>
typename Map::key_type state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

template <class Map>
auto find_param_state(Map& state, const torch::Tensor& p) {
  return state.find(state_key<Map>(p));
}

// The statistics of one parameter's optimizer state, in the order
// optimizer_views() lends them (undefined ones included).
inline std::vector<torch::Tensor*> statistics(torch::optim::OptimizerParamState* base) {
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(base))
    return {&adam->exp_avg(), &adam->exp_avg_sq(), &adam->max_exp_avg_sq()};
  if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(base))
    return {&adamw->exp_avg(), &adamw->exp_avg_sq(), &adamw->max_exp_avg_sq()};
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(base)) return {&sgd->momentum_buffer()};
  return {};
}

// Calls f with the parameter's Adam or AdamW state, the ones with a step
// counter (SGD keeps none).
template <class F>
void with_step(torch::optim::OptimizerParamState* base, F f) {
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(base)) f(*adam);
  if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(base)) f(*adamw);
}

}  // namespace loom::train::detail
