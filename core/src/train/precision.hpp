// SPDX-License-Identifier: Apache-2.0
// trainer.precision = "bf16": the forward pass (training loss and
// validation) under LibTorch's autocast in bfloat16 on the training device,
// as torch.autocast does it; backward and the optimizer stay in fp32.
// Internal; includes LibTorch.
#pragma once

#include <torch/torch.h>

namespace loom::train {

// Switches autocast on for the device's type while it lives (a no-op for
// "fp32"), and off again, dropping autocast's cast cache, at the end.
class Autocast {
 public:
  Autocast(const torch::Device& device, bool bf16);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  c10::DeviceType type_;
  bool on_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace loom::train
