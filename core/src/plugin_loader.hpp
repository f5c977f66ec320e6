// SPDX-License-Identifier: Apache-2.0
// Loading one plugin file: dlopen through Boost.DLL, find the entry symbol,
// negotiate, and validate the answer. Internal to libloom.
#pragma once

#include <string>
#include <vector>

#include "loom/plugin_record.hpp"

namespace loom {

// A negotiated plugin. The library stays loaded for the life of the process
// (plugins are resident: nothing of theirs may outlive an unload).
struct LoadedPlugin {
  PluginCandidate candidate;
  PluginDescriptor descriptor;
  const void* vtable = nullptr;  // const loom_collective_v1* or const loom_strategy_v1*
  // Faults that do not stop it working (symbols exported besides the entry
  // point), each naming the file and the fix.
  std::vector<std::string> warnings;
};

// Loads and validates; on failure returns false with *reason saying what is
// wrong in words a user can act on (without the path, which callers add).
bool load_plugin(const PluginCandidate& candidate, LoadedPlugin* out, std::string* reason);

}  // namespace loom
