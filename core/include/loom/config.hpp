// SPDX-License-Identifier: Apache-2.0
// loom/config.hpp: the parts of a Loom TOML config file the host itself
// reads: where plugins are ([plugins] path) and the options of the chosen
// collective ([collective] name, [collective.options]).
//
// Errors name the file, line and key, and what would be valid (Error::usage).
#pragma once

#include <string>
#include <vector>

#include "loom/host.hpp"

namespace loom {

struct HostFileConfig {
  std::vector<std::string> plugin_paths;  // absolute (relative ones resolved against the file's folder)
  std::string collective;                 // [collective] name; empty if absent
  PluginOptionMap options;                // [collective.options] for that collective
  PluginOptionMap option_sources;         // where each option was set: "file:line"
};

// Reads path. Sections other than [plugins] and [collective] are left to
// their owners (the trainer) and not checked here.
HostFileConfig load_host_config(const std::string& path);

}  // namespace loom
