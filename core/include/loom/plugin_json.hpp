// SPDX-License-Identifier: Apache-2.0
// loom/plugin_json.hpp: plugin listings as JSON text, the form `loom plugins
// --json` prints and Python's loom.plugins() returns.
#pragma once

#include <string>
#include <vector>

#include "loom/host.hpp"
#include "loom/plugin_record.hpp"

namespace loom {

// One plugin: name, kind, path, state ("ok", "unavailable", "broken",
// "shadowed"), status, reason, version, abi, capabilities, options...
std::string plugin_record_json(const PluginRecord& record, int indent = 2);
// {"search_path": [...], "warnings": [...], "plugins": [...]}.
std::string plugin_listing_json(const Host& host, const std::vector<PluginRecord>& records, int indent = 2);

}  // namespace loom
