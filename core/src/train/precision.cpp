// SPDX-License-Identifier: Apache-2.0
#include "precision.hpp"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace loom::train {
namespace {

// LibTorch 2.4 made autocast's switches take the device type; before, CUDA
// and the CPU had a function each.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool enabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void set_enabled(c10::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
c10::ScalarType dtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void set_dtype(c10::DeviceType t, c10::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
bool enabled(c10::DeviceType t) { return t == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
void set_enabled(c10::DeviceType t, bool on) {
  if (t == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
c10::ScalarType dtype(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(c10::DeviceType t, c10::ScalarType d) {
  if (t == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(d);
  } else {
    at::autocast::set_autocast_cpu_dtype(d);
  }
}
#endif

}  // namespace

Autocast::Autocast(const torch::Device& device, bool bf16) : type_(device.type()), on_(bf16) {
  if (!on_) return;
  was_enabled_ = enabled(type_);
  was_dtype_ = dtype(type_);
  set_dtype(type_, c10::ScalarType::BFloat16);
  set_enabled(type_, true);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!on_) return;
  // The cache holds the bf16 copies of the weights made in this forward.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(type_, was_enabled_);
  set_dtype(type_, was_dtype_);
}

}  // namespace loom::train
