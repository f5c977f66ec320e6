// SPDX-License-Identifier: Apache-2.0
// TOML helpers shared by the host and trainer config readers. Internal.
#pragma once

#include <toml++/toml.h>

#include <string>

#include "loom/config.hpp"

namespace loom {

// "file:line" of a node; "--set" for a value given on the command line.
std::string toml_where(const std::string& path, const toml::node& node);
// The text form of a scalar or a list of strings, as plugins and tasks get it.
std::string toml_option_text(const std::string& path, const std::string& key, const toml::node& node);
// The plugin name a string node gives for key ("strategy.name"); throws
// Error::usage when it is not a string or could not be a plugin file's name.
std::string toml_plugin_name(const std::string& path, const std::string& key, const toml::node& node, loom_kind kind);
// Reads [plugins] and [collective] from a parsed file.
HostFileConfig host_config_from(const toml::table& root, const std::string& path);
// Parses a file; syntax errors become Error::usage with file:line.
toml::table parse_toml_file(const std::string& path);

}  // namespace loom
