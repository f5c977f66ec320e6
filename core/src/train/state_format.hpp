// SPDX-License-Identifier: Apache-2.0
// The raw training-state format (state_format.cpp describes it).
// Internal; no LibTorch.
#pragma once

#include <cstddef>

namespace loom::train {

// Whether the bytes begin as a raw state (loom-state-2) does.
bool is_raw_state(const char* data, size_t len);

}  // namespace loom::train
