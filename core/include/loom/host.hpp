// SPDX-License-Identifier: Apache-2.0
// loom/host.hpp: the host side of the plugin ABI: finds plugins, loads and
// initialises them with the host services (logging, options, the job's
// store, opening other plugins), and keeps them resident.
//
// Thread safety: open_* and store() may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/collective.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"
#include "loom/plugin_record.hpp"
#include "loom/store.hpp"
#include "loom/strategy.hpp"

namespace loom {

// Options configured for plugins: (kind, name) -> option -> text value.
using PluginOptionMap = std::map<std::pair<loom_kind, std::string>, std::map<std::string, std::string>>;

struct HostConfig {
  std::vector<PluginDir> search_path;
  PluginOptionMap options;
  PluginOptionMap option_sources;  // same keys as options: where each was set ("file:line")
  // [collective] name: the default for a strategy's `collective` option.
  std::string default_collective;
  std::chrono::milliseconds store_timeout{std::chrono::seconds(300)};
  std::chrono::milliseconds probe_timeout{std::chrono::seconds(20)};
};

class Host {
 public:
  Host(HostConfig config, JobInfo job);
  ~Host();
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  const JobInfo& job() const { return job_; }
  const HostConfig& config() const { return config_; }

  // Every plugin file in the search path, in search order.
  const std::vector<PluginCandidate>& candidates() const { return candidates_; }
  // What the scan skipped with a warning (libx_colective.so); each was logged.
  const std::vector<std::string>& scan_warnings() const { return scan_warnings_; }
  // The file that wins for (kind, name), or nullptr.
  const PluginCandidate* find(loom_kind kind, const std::string& name) const;
  // Names of the usable plugins of a kind, for "valid choices" messages.
  std::vector<std::string> names(loom_kind kind) const;

  // Probes every candidate, each in a child process of its own, so that a
  // plugin that crashes or hangs is reported instead of taking the listing
  // down. Never throws for a plugin's fault.
  std::vector<PluginRecord> probe_all() const;
  PluginRecord probe(const PluginCandidate& candidate) const;

  // Loads, negotiates and initialises a collective plugin in this process.
  // Throws Error::usage naming the path and the reason when it cannot (not
  // found, broken, unavailable, bad option); a plugin that crashes during
  // init ends the process with exit code 2 and that message.
  std::shared_ptr<Collective> open_collective(const std::string& name);

  // The same for a strategy plugin; "single" is built in (no file needed).
  std::shared_ptr<Strategy> open_strategy(const std::string& name);

  // Loads a plugin (without initialising it) and checks the options the
  // config gives it; throws Error::usage like open_*.
  void check_options(loom_kind kind, const std::string& name);

  // The job's rendezvous store, connected on first use; nullptr if none.
  Store* store();

 private:
  struct OpenedInstance;
  OpenedInstance open_instance(loom_kind kind, const std::string& name);
  // A strategy option named `collective` names a collective plugin: default
  // it to [collective] name and check that the plugin exists.
  void resolve_collective_option(const PluginDescriptor& strategy, std::map<std::string, std::string>* configured,
                                 const std::map<std::string, std::string>* sources) const;

  // Logs a warning once per host: several plugins share a folder, and
  // check_options loads a plugin that open_* loads again.
  void warn_once(const std::string& warning);

  HostConfig config_;
  JobInfo job_;
  std::vector<PluginCandidate> candidates_;
  std::vector<std::string> scan_warnings_;
  std::mutex warned_mutex_;
  std::vector<std::string> warned_;
  std::mutex store_mutex_;
  std::unique_ptr<Store> store_;
  bool store_tried_ = false;
  uint64_t comm_sequence_ = 0;
  friend class HostedCollective;
};

}  // namespace loom
