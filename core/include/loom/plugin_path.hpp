// loom/plugin_path.hpp: where plugins are looked for, in DESIGN.md's order.
//
//   1. --plugin-path on the command line
//   2. [plugins] path in the config file
//   3. LOOM_PLUGIN_PATH (colon-separated)
//   4. <dir of libloom>/loom/plugins: the build tree (which mirrors the
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

// <dir of libloom.so>/loom/plugins.
std::string default_plugin_dir();

// Splits "lib<name>_<kind>.so" into candidate fields; false for other names.
bool parse_plugin_file_name(const std::string& file_name, std::string* name, loom_kind* kind);

// Every candidate file in the search path, in search order (duplicates kept).
std::vector<PluginCandidate> find_plugin_files(const std::vector<PluginDir>& dirs);

}  // namespace loom
