// SPDX-License-Identifier: Apache-2.0
// loom/plugin_record.hpp: what the core knows about one plugin file, whether
// or not it could be loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/plugin.h"

namespace loom {

// "collective" / "strategy"; "unknown" for anything else.
const char* kind_name(loom_kind kind);
// Inverse of kind_name; nullopt for an unknown word.
std::optional<loom_kind> parse_kind(const std::string& word);
// "bool", "int", "float", "string", "string list".
const char* option_type_name(loom_option_type type);
// "1.0" for LOOM_ABI_MAKE(1, 0).
std::string abi_string(uint32_t version);
// Names of the set LOOM_CAP_* bits of a collective ("host-memory", "abort"...).
std::vector<std::string> capability_names(loom_kind kind, uint64_t capabilities);
// Names of the LOOM_OP_* bits set in ops ("allreduce", "send/recv"...).
std::vector<std::string> op_names(uint64_t ops);

struct OptionInfo {
  std::string name;
  loom_option_type type = LOOM_OPTION_STRING;
  std::optional<std::string> default_value;  // nullopt: required
  std::string help;
};

// A file that looks like a plugin: lib<name>_<kind>.so in a search folder.
struct PluginCandidate {
  std::string path;    // absolute
  std::string name;    // from the file name
  loom_kind kind = 0;  // from the file name
  std::string origin;  // which search-path entry found it ("LOOM_PLUGIN_PATH", ...)
};

// The descriptor a plugin published, copied out of its memory.
struct PluginDescriptor {
  std::string name;
  std::string version;
  std::string description;
  uint32_t abi_version = 0;         // negotiated: what host and plugin use
  uint32_t vtable_abi_version = 0;  // what the vtable's layout was written for (>= abi_version)
  uint64_t capabilities = 0;
  uint64_t absent_ops = 0;       // collectives, ABI 1.7: LOOM_OP_* bits the plugin leaves out
  bool comm_last_error = false;  // collectives, ABI 1.7: reports per communicator
  bool comm_stats = false;       // collectives, ABI 1.11: counts each communicator's traffic
  std::vector<OptionInfo> options;

  const OptionInfo* find_option(const std::string& option) const;
};

struct PluginRecord {
  enum class State { kOk, kUnavailable, kBroken, kShadowed };

  PluginCandidate candidate;
  State state = State::kBroken;
  std::string reason;                     // empty when kOk
  std::optional<PluginDescriptor> descriptor;  // set once negotiation succeeded
  // Faults that do not stop it loading (unsafe permissions, extra exports),
  // each naming the file or folder and the fix.
  std::vector<std::string> warnings;

  // "ok", "unavailable: <reason>", "broken: <reason>", "shadowed: <reason>".
  std::string status_text() const;
};

}  // namespace loom
