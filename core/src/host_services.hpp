// SPDX-License-Identifier: Apache-2.0
// The loom_host_v1 table the host gives each plugin instance, and the state
// behind it. Internal to libloom.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "loom/collective.hpp"
#include "loom/plugin.h"
#include "loom/plugin_record.hpp"
#include "host_oob.hpp"

namespace loom {

class Host;

struct PluginHostContext {
  Host* host = nullptr;       // may be null in a probe: no store, no nested plugins
  std::string label;          // "collective 'mpi'"
  std::map<std::string, std::string> values;  // every declared option with a value
  std::mutex children_mutex;  // plugins this plugin opened through open_plugin
  std::map<void*, std::shared_ptr<Collective>> children;
  std::shared_ptr<Error> open_error;  // why the last open_plugin failed, if it did
  std::unique_ptr<OobHandles> oob;    // what oob_open handed out (ABI 1.7)
  loom_host_v1 table{};
};

// Checks the configured options against the plugin's declarations (unknown
// key, wrong type: Error::usage listing what is valid) and builds the table.
// sources, when given, maps an option to "file:line" for the messages.
std::unique_ptr<PluginHostContext> make_host_context(Host* host, const PluginCandidate& candidate,
                                                     const PluginDescriptor& descriptor,
                                                     const std::map<std::string, std::string>& configured,
                                                     int32_t rank, int32_t world_size, int32_t local_rank,
                                                     const std::map<std::string, std::string>* sources = nullptr);

// Options a strategy passes down to the collective it opens through
// open_plugin (its `listen`, so one setting confines every socket of a
// peer): while an instance lives, Host::open_collective on the same thread
// uses them for options the collective declares and the config leaves unset.
// A scope rather than a parameter keeps Host's public interface as it is.
class InheritedOptions {
 public:
  explicit InheritedOptions(std::map<std::string, std::string> values);
  ~InheritedOptions();
  InheritedOptions(const InheritedOptions&) = delete;
  InheritedOptions& operator=(const InheritedOptions&) = delete;
  static const std::map<std::string, std::string>& current();  // empty outside any scope

 private:
  std::map<std::string, std::string> values_;
  const InheritedOptions* outer_;
};

// Checks one option value against its declared type; empty string when fine,
// else what would be valid.
std::string check_option_value(const OptionInfo& option, const std::string& value);

}  // namespace loom
