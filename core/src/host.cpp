// SPDX-License-Identifier: Apache-2.0
#include "loom/host.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "crash_guard.hpp"
#include "host_oob.hpp"
#include "host_services.hpp"
#include "plugin_loader.hpp"
#include "loom/strategy.h"
#include "strategy_internal.hpp"

namespace loom {
namespace {

// A strategy's options may also come from the environment as LOOM_<NAME>
// (LOOM_INITIAL_PEERS for collab's initial_peers), overriding the config
// file: each machine of a swarm passes its own values while all share one
// config. Collectives are not mapped: their options are per job, not per
// machine, and a stray variable should not retune a backend silently.
void apply_environment(loom_kind kind, const PluginDescriptor& plugin, std::map<std::string, std::string>* configured,
                       std::map<std::string, std::string>* sources) {
  if (kind != LOOM_KIND_STRATEGY) return;
  for (const auto& option : plugin.options) {
    std::string var = "LOOM_";
    for (char c : option.name) var += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const char* value = std::getenv(var.c_str());
    if (value == nullptr || *value == '\0') continue;
    (*configured)[option.name] = value;
    (*sources)[option.name] = "environment variable " + var;
  }
}

}  // namespace

// A collective plugin instance owned by the host: fini runs when the last
// handle goes away, after every communicator of it.
class HostedCollective final : public Collective {
 public:
  HostedCollective(Host* host, const LoadedPlugin& plugin, std::unique_ptr<PluginHostContext> services,
                   loom_collective_ctx* ctx)
      : Collective(static_cast<const loom_collective_v1*>(plugin.vtable), ctx, plugin.descriptor,
                   plugin.candidate.path),
        host_(host),
        services_(std::move(services)) {}

  ~HostedCollective() override { vtable_->fini(ctx_); }

 protected:
  std::function<Status(const void*, size_t, void*, int64_t)> default_oob(const CommOptions& options) override {
    Store* store = host_->store();
    if (store == nullptr && options.size == 1) {  // a job of one needs no store: the exchange is a copy
      return [](const void* send, size_t len, void* recv, int64_t) {
        if (len > 0) std::memmove(recv, send, len);
        return Status::ok();
      };
    }
    if (store == nullptr) return {};
    uint64_t sequence;
    {
      std::lock_guard<std::mutex> lock(host_->store_mutex_);
      sequence = host_->comm_sequence_++;  // equal on every rank: comms are created in the same order
    }
    // loom/comm/...: apart from the loom/oob/<kind>/<plugin>/... of oob_open.
    std::string prefix = "loom/comm/" + options.name + "/" + std::to_string(sequence) + "/";
    int32_t rank = options.rank, size = options.size;
    return [store, prefix, rank, size](const void* send, size_t len, void* recv, int64_t timeout_ms) -> Status {
      return store_allgather(store, prefix, rank, size, send, len, recv, timeout_ms);
    };
  }

 private:
  Host* host_;
  std::unique_ptr<PluginHostContext> services_;
};

struct Host::OpenedInstance {
  LoadedPlugin plugin;
  std::unique_ptr<PluginHostContext> services;
  void* ctx = nullptr;
};

Host::Host(HostConfig config, JobInfo job) : config_(std::move(config)), job_(std::move(job)) {
  candidates_ = find_plugin_files(config_.search_path, &scan_warnings_);
  for (const auto& warning : scan_warnings_) warn_once(warning);
}

Host::~Host() = default;

void Host::warn_once(const std::string& warning) {
  std::lock_guard<std::mutex> lock(warned_mutex_);
  if (std::find(warned_.begin(), warned_.end(), warning) != warned_.end()) return;
  warned_.push_back(warning);
  spdlog::warn("{}", warning);
}

const PluginCandidate* Host::find(loom_kind kind, const std::string& name) const {
  for (const auto& c : candidates_) {
    if (c.kind == kind && c.name == name) return &c;
  }
  return nullptr;
}

std::vector<std::string> Host::names(loom_kind kind) const {
  std::vector<std::string> names;
  for (const auto& c : candidates_) {
    if (c.kind == kind && std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  }
  return names;
}

std::shared_ptr<Collective> Host::open_collective(const std::string& name) {
  OpenedInstance opened = open_instance(LOOM_KIND_COLLECTIVE, name);
  return std::make_shared<HostedCollective>(this, opened.plugin, std::move(opened.services),
                                            static_cast<loom_collective_ctx*>(opened.ctx));
}

Host::OpenedInstance Host::open_instance(loom_kind kind, const std::string& name) {
  const std::string kind_word = kind_name(kind);
  OpenedInstance opened;
  const bool builtin = kind == LOOM_KIND_STRATEGY && name == "single" && find(kind, name) == nullptr;
  if (builtin) {
    opened.plugin = builtin_single_strategy();
  } else {
    const PluginCandidate* candidate = find(kind, name);
    if (candidate == nullptr) {
      std::string valid, searched;
      if (kind == LOOM_KIND_STRATEGY) valid = "single (built in)";
      for (const auto& n : names(kind)) valid += (valid.empty() ? "" : ", ") + n;
      for (const auto& d : config_.search_path) searched += (searched.empty() ? "" : ":") + d.path;
      throw Error::usage("no " + kind_word + " plugin named '" + excerpt(name) + "' (no lib" + excerpt(name) + "_" +
                         kind_word + ".so in the plugin path " + excerpt(searched, 1000) +
                         "); valid choices: " + (valid.empty() ? "none" : valid));
    }
    // Before dlopen, which runs the file's constructors.
    for (const auto& warning : plugin_file_warnings(candidate->path)) warn_once(warning);
    std::string reason;
    CrashGuard guard(kind_word + " plugin '" + name + "' (" + candidate->path + ") crashed while loading");
    if (!load_plugin(*candidate, &opened.plugin, &reason)) {
      throw Error::usage(kind_word + " plugin '" + name + "' (" + candidate->path + "): " + reason);
    }
    for (const auto& warning : opened.plugin.warnings) warn_once(warning);
  }
  const std::string where = kind_word + " plugin '" + name + "' (" + opened.plugin.candidate.path + ")";
  std::map<std::string, std::string> configured;
  if (auto it = config_.options.find({kind, name}); it != config_.options.end()) configured = it->second;
  std::map<std::string, std::string> sources;
  if (auto it = config_.option_sources.find({kind, name}); it != config_.option_sources.end()) sources = it->second;
  apply_environment(kind, opened.plugin.descriptor, &configured, &sources);
  for (const auto& [key, value] : InheritedOptions::current()) {
    if (kind != LOOM_KIND_COLLECTIVE || opened.plugin.descriptor.find_option(key) == nullptr || configured.count(key))
      continue;
    configured[key] = value;
    sources[key] = "the strategy's option " + key;
  }
  if (kind == LOOM_KIND_STRATEGY) resolve_collective_option(opened.plugin.descriptor, &configured, &sources);
  opened.services = make_host_context(this, opened.plugin.candidate, opened.plugin.descriptor, configured, job_.rank,
                                      job_.world_size, job_.local_rank, &sources);
  char why[1024] = {0};
  loom_status status;
  {
    CrashGuard guard(where + " crashed during init");
    if (kind == LOOM_KIND_COLLECTIVE) {
      auto* vt = static_cast<const loom_collective_v1*>(opened.plugin.vtable);
      loom_collective_ctx* ctx = nullptr;
      status = vt->init(&opened.services->table, &ctx, why, sizeof why);
      opened.ctx = ctx;
    } else {
      auto* vt = static_cast<const loom_strategy_v1*>(opened.plugin.vtable);
      loom_strategy_ctx* ctx = nullptr;
      status = vt->init(&opened.services->table, &ctx, why, sizeof why);
      opened.ctx = ctx;
    }
  }
  why[sizeof why - 1] = '\0';
  if (status != LOOM_OK || opened.ctx == nullptr) {
    if (status == LOOM_ERR_UNAVAILABLE) throw Error::usage(where + " is unavailable here: " + why);
    throw Error::usage(where + " failed to initialise (" + loom_status_name(status) + "): " +
                       (why[0] ? why : "no reason given"));
  }
  // Which file a run really uses (the first in the plugin path wins) is worth
  // a line in every run's log; the built-in strategy opens no file.
  spdlog::log(builtin ? spdlog::level::debug : spdlog::level::info,
              "opened {} version {} (ABI {})", where, opened.plugin.descriptor.version,
              abi_string(opened.plugin.descriptor.abi_version));
  return opened;
}

void Host::resolve_collective_option(const PluginDescriptor& strategy, std::map<std::string, std::string>* configured,
                                     const std::map<std::string, std::string>* sources) const {
  const OptionInfo* option = strategy.find_option("collective");
  if (option == nullptr) return;
  if (!configured->count("collective") && !config_.default_collective.empty()) {
    (*configured)["collective"] = config_.default_collective;
  }
  std::string chosen = configured->count("collective") ? configured->at("collective") : option->default_value.value_or("");
  if (chosen.empty() || find(LOOM_KIND_COLLECTIVE, chosen) != nullptr) return;
  std::string valid, where;
  for (const auto& n : names(LOOM_KIND_COLLECTIVE)) valid += (valid.empty() ? "" : ", ") + n;
  if (sources != nullptr && sources->count("collective")) where = sources->at("collective") + ": ";
  throw Error::usage(where + "strategy '" + strategy.name + "' would use the collective plugin '" + excerpt(chosen) +
                     "', which is not in the plugin path; valid choices: " + (valid.empty() ? "none" : valid));
}

void Host::check_options(loom_kind kind, const std::string& name) {
  const PluginCandidate* candidate = find(kind, name);
  const std::string kind_word = kind_name(kind);
  if (candidate == nullptr) {
    std::string valid;
    for (const auto& n : names(kind)) valid += (valid.empty() ? "" : ", ") + n;
    throw Error::usage("no " + kind_word + " plugin named '" + excerpt(name) + "'; valid choices: " +
                       (valid.empty() ? "none" : valid));
  }
  for (const auto& warning : plugin_file_warnings(candidate->path)) warn_once(warning);
  LoadedPlugin plugin;
  std::string reason;
  {
    CrashGuard guard(kind_word + " plugin '" + name + "' (" + candidate->path + ") crashed while loading");
    if (!load_plugin(*candidate, &plugin, &reason)) {
      throw Error::usage(kind_word + " plugin '" + name + "' (" + candidate->path + "): " + reason);
    }
  }
  for (const auto& warning : plugin.warnings) warn_once(warning);
  std::map<std::string, std::string> configured;
  if (auto it = config_.options.find({kind, name}); it != config_.options.end()) configured = it->second;
  std::map<std::string, std::string> sources;
  if (auto it = config_.option_sources.find({kind, name}); it != config_.option_sources.end()) sources = it->second;
  apply_environment(kind, plugin.descriptor, &configured, &sources);
  make_host_context(nullptr, *candidate, plugin.descriptor, configured, job_.rank, job_.world_size, job_.local_rank,
                    &sources);
}

std::shared_ptr<Strategy> Host::open_strategy(const std::string& name) {
  OpenedInstance opened = open_instance(LOOM_KIND_STRATEGY, name);
  return make_hosted_strategy(opened.plugin, std::move(opened.services), static_cast<loom_strategy_ctx*>(opened.ctx));
}

Store* Host::store() {
  std::lock_guard<std::mutex> lock(store_mutex_);
  if (!store_tried_) {
    store_tried_ = true;
    store_ = make_job_store(job_, config_.store_timeout);
  }
  return store_.get();
}

}  // namespace loom
