// SPDX-License-Identifier: Apache-2.0
// Loading a user's shared library of C++ tasks ([trainer] task_library):
// its static initialisers call loom::train::register_task. Internal to
// libloom; no LibTorch here.
#pragma once

#include <string>

namespace loom::train {

// dlopens `path` once (RTLD_NOW | RTLD_GLOBAL, so its tasks' symbols resolve
// against this libloom and LibTorch). Throws Error::usage naming `where`
// ("file:line") and the loader's reason.
void load_task_library(const std::string& path, const std::string& where);

}  // namespace loom::train
