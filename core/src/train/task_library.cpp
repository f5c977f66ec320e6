// SPDX-License-Identifier: Apache-2.0
#include "task_library.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <set>

#include "loom/status.hpp"

namespace loom::train {

void load_task_library(const std::string& path, const std::string& where) {
  static std::set<std::string> loaded;  // a library registers its tasks once
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (loaded.count(absolute)) return;
  if (!std::filesystem::is_regular_file(absolute, ec)) {
    throw Error::usage(where + ": trainer.task_library = \"" + excerpt(path) +
                       "\" is not a file; it names a shared library built against libloom that calls "
                       "loom::train::register_task");
  }
  // Never unloaded: the tasks it registered point into it.
  if (dlopen(absolute.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    throw Error::usage(where + ": trainer.task_library = \"" + excerpt(path) + "\" could not be loaded: " +
                       (why ? why : "unknown reason") +
                       " (it must be built against this libloom and the LibTorch it was built with)");
  }
  loaded.insert(absolute);
}

}  // namespace loom::train
