// SPDX-License-Identifier: Apache-2.0
// loom/plugin_path.hpp: where plugins are looked for, in DESIGN.md's order.
//
//   1. --plugin-path on the command line
//   2. [plugins] path in the config file
//   3. LOOM_PLUGIN_PATH (colon-separated)
//   4. <dir of libloom>/plugins: the build tree (which mirrors the
//      installed layout) or the installed <libdir>/loom/plugins
//
// The first folder holding lib<name>_<kind>.so wins; later files of the same
// kind and name are listed as shadowed.
#pragma once

#include <string>
#include <vector>

#include "loom/plugin_record.hpp"

namespace loom {

struct PluginDir {
  std::string path;
  std::string origin;  // "--plugin-path", "config", "LOOM_PLUGIN_PATH", "libloom"
};

// The search path. Relative entries are made absolute against the current
// folder (config entries against the config file's folder, by the caller).
std::vector<PluginDir> plugin_search_path(const std::vector<std::string>& cli_paths,
                                          const std::vector<std::string>& config_paths);

// <dir of libloom.so>/plugins.
std::string default_plugin_dir();

// Splits "lib<name>_<kind>.so" into candidate fields; false for other names.
bool parse_plugin_file_name(const std::string& file_name, std::string* name, loom_kind* kind);

// For a file name shaped like lib<name>_<kind>.so whose <kind> is no plugin
// kind (libx_colective.so), what is wrong with it; empty for any other name.
std::string near_miss_plugin_file_name(const std::string& file_name);

// Every candidate file in the search path, in search order (duplicates kept).
// Files skipped for a near-miss name are reported in *warnings.
std::vector<PluginCandidate> find_plugin_files(const std::vector<PluginDir>& dirs,
                                               std::vector<std::string>* warnings = nullptr);

// Why loading the plugin file at path would be unsafe, as dynamic loaders
// warn: its folder is world-writable, or the file is world-writable or owned
// by neither this user nor root. Empty when none applies.
std::vector<std::string> plugin_file_warnings(const std::string& path);

}  // namespace loom
