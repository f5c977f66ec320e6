// SPDX-License-Identifier: Apache-2.0
#include "loom/plugin_json.hpp"

#include <nlohmann/json.hpp>

namespace loom {
namespace {

using json = nlohmann::json;

const char* state_word(PluginRecord::State s) {
  switch (s) {
    case PluginRecord::State::kOk: return "ok";
    case PluginRecord::State::kUnavailable: return "unavailable";
    case PluginRecord::State::kBroken: return "broken";
    case PluginRecord::State::kShadowed: return "shadowed";
  }
  return "broken";
}

json record_json(const PluginRecord& r) {
  json j = {{"name", r.candidate.name},       {"kind", kind_name(r.candidate.kind)},
            {"path", r.candidate.path},       {"found_by", r.candidate.origin},
            {"state", state_word(r.state)},   {"status", r.status_text()},
            {"reason", r.reason},             {"version", nullptr},
            {"abi", nullptr},                 {"description", nullptr},
            {"warnings", r.warnings}};
  if (r.descriptor) {
    const auto& d = *r.descriptor;
    j["version"] = d.version;
    j["abi"] = abi_string(d.abi_version);
    j["description"] = d.description;
    j["vtable_abi"] = abi_string(d.vtable_abi_version);
    j["capabilities"] = capability_names(r.candidate.kind, d.capabilities);
    if (r.candidate.kind == LOOM_KIND_COLLECTIVE) {
      j["operations"] = op_names(LOOM_OP_ALL & ~d.absent_ops);
      j["absent_operations"] = op_names(d.absent_ops);
      j["traffic_stats"] = d.comm_stats;
    }
    json options = json::array();
    for (const auto& o : d.options) {
      options.push_back({{"name", o.name}, {"type", option_type_name(o.type)},
                         {"default", o.default_value ? json(*o.default_value) : json(nullptr)},
                         {"required", !o.default_value.has_value()}, {"help", o.help}});
    }
    j["options"] = options;
  }
  return j;
}

}  // namespace

std::string plugin_record_json(const PluginRecord& record, int indent) { return record_json(record).dump(indent); }

std::string plugin_listing_json(const Host& host, const std::vector<PluginRecord>& records, int indent) {
  json dirs = json::array();
  for (const auto& d : host.config().search_path) dirs.push_back({{"path", d.path}, {"origin", d.origin}});
  json plugins = json::array();
  for (const auto& r : records) plugins.push_back(record_json(r));
  return json{{"search_path", dirs}, {"warnings", host.scan_warnings()}, {"plugins", plugins}}.dump(indent);
}

}  // namespace loom
