// SPDX-License-Identifier: Apache-2.0
#include "loom/config.hpp"

#include "config_toml.hpp"

#include "loom/plugin_record.hpp"

#include <iomanip>
#include <sstream>

namespace loom {
namespace {

std::string where(const std::string& path, const toml::node& node) { return toml_where(path, node); }

std::string dirname_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::string toml_where(const std::string& path, const toml::node& node) {
  auto line = node.source().begin.line;
  return line > 0 ? path + ":" + std::to_string(line) : std::string("--set");
}

toml::table parse_toml_file(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error::usage(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
}

// The text form of a scalar option value, as plugins receive it.
std::string toml_option_text(const std::string& path, const std::string& key, const toml::node& node) {
  if (auto v = node.value<bool>(); v && node.is_boolean()) return *v ? "true" : "false";
  if (node.is_integer()) return std::to_string(*node.value<int64_t>());
  if (node.is_floating_point()) {
    std::ostringstream text;
    text << std::setprecision(17) << *node.value<double>();
    return text.str();
  }
  if (node.is_string()) return *node.value<std::string>();
  if (auto* array = node.as_array()) {
    std::string joined;
    for (const auto& item : *array) {
      if (!item.is_string()) throw Error::usage(where(path, item) + ": " + excerpt(key) + ": list items must be strings");
      joined += (joined.empty() ? "" : ",") + *item.value<std::string>();
    }
    return joined;
  }
  throw Error::usage(where(path, node) + ": " + excerpt(key) + " must be a boolean, number, string or list of strings");
}

std::string toml_plugin_name(const std::string& path, const std::string& key, const toml::node& node, loom_kind kind) {
  // The name must fit in its file's name, lib<name>_<kind>.so, at most NAME_MAX bytes.
  const size_t max = 255 - std::string("lib_.so").size() - std::string(kind_name(kind)).size();
  if (!node.is_string() || node.value<std::string>()->size() > max) {
    throw Error::usage(where(path, node) + ": " + key + " must be a " + kind_name(kind) + " plugin's name (a string of at most " +
                       std::to_string(max) + " bytes, as in lib<name>_" + kind_name(kind) + ".so)");
  }
  return *node.value<std::string>();
}

HostFileConfig load_host_config(const std::string& path) { return host_config_from(parse_toml_file(path), path); }

HostFileConfig host_config_from(const toml::table& root, const std::string& path) {
  HostFileConfig config;
  if (auto* plugins = root["plugins"].as_table()) {
    for (const auto& [key, node] : *plugins) {
      if (key.str() != "path") {
        throw Error::usage(where(path, node) + ": unknown key plugins." + excerpt(std::string(key.str())) + "; valid keys: path");
      }
      auto add = [&](const toml::node& item) {
        if (!item.is_string()) throw Error::usage(where(path, item) + ": plugins.path must be a string or a list of strings");
        std::string dir = *item.value<std::string>();
        config.plugin_paths.push_back(dir.empty() || dir[0] == '/' ? dir : dirname_of(path) + "/" + dir);
      };
      if (auto* list = node.as_array()) {
        for (const auto& item : *list) add(item);
      } else {
        add(node);
      }
    }
  }
  if (auto* collective = root["collective"].as_table()) {
    for (const auto& [key, node] : *collective) {
      std::string k(key.str());
      if (k == "name") {
        config.collective = toml_plugin_name(path, "collective.name", node, LOOM_KIND_COLLECTIVE);
      } else if (k != "options") {
        throw Error::usage(where(path, node) + ": unknown key collective." + excerpt(k) + "; valid keys: name, options");
      }
    }
    if (auto* options = (*collective)["options"].as_table()) {
      if (config.collective.empty()) {
        throw Error::usage(where(path, *options) + ": [collective.options] needs collective.name");
      }
      auto& target = config.options[{LOOM_KIND_COLLECTIVE, config.collective}];
      auto& sources = config.option_sources[{LOOM_KIND_COLLECTIVE, config.collective}];
      for (const auto& [key, node] : *options) {
        std::string k(key.str());
        target[k] = toml_option_text(path, "collective.options." + k, node);
        sources[k] = where(path, node);
      }
    }
  }
  return config;
}

}  // namespace loom
