// SPDX-License-Identifier: Apache-2.0
// Probing plugins for `loom plugins`: each file is loaded, negotiated and
// initialised in a child process of its own (as GStreamer's plugin scanner
// does), so a plugin that crashes or hangs is reported, never fatal.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "host_services.hpp"
#include "loom/collective.h"
#include "loom/host.hpp"
#include "loom/strategy.h"
#include "plugin_loader.hpp"

namespace loom {
namespace {

using json = nlohmann::json;

json descriptor_json(const PluginDescriptor& d) {
  json options = json::array();
  for (const auto& o : d.options) {
    options.push_back({{"name", o.name}, {"type", static_cast<int>(o.type)}, {"help", o.help},
                       {"default", o.default_value ? json(*o.default_value) : json(nullptr)}});
  }
  return {{"name", d.name},
          {"version", d.version},
          {"description", d.description},
          {"abi", d.abi_version},
          {"vtable_abi", d.vtable_abi_version},
          {"capabilities", d.capabilities},
          {"absent_ops", d.absent_ops},
          {"comm_last_error", d.comm_last_error},
          {"comm_stats", d.comm_stats},
          {"options", options}};
}

PluginDescriptor descriptor_from_json(const json& j) {
  PluginDescriptor d;
  d.name = j.at("name");
  d.version = j.at("version");
  d.description = j.at("description");
  d.abi_version = j.at("abi");
  d.capabilities = j.at("capabilities");
  d.vtable_abi_version = j.at("vtable_abi");
  d.absent_ops = j.at("absent_ops");
  d.comm_last_error = j.at("comm_last_error");
  d.comm_stats = j.at("comm_stats");
  for (const auto& o : j.at("options")) {
    OptionInfo opt;
    opt.name = o.at("name");
    opt.type = o.at("type").get<int>();
    opt.help = o.at("help");
    if (!o.at("default").is_null()) opt.default_value = o.at("default").get<std::string>();
    d.options.push_back(std::move(opt));
  }
  return d;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Runs in the child: reports "phase <name>" lines, then one "result <json>".
[[noreturn]] void probe_child(int fd, const PluginCandidate& c, const JobInfo& job,
                              const std::map<std::string, std::string>& configured) {
  json result = {{"state", "broken"}};
  write_all(fd, "phase loading\n");
  LoadedPlugin plugin;
  std::string reason;
  if (!load_plugin(c, &plugin, &reason)) {
    result["reason"] = reason;
    write_all(fd, "result " + result.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    _exit(0);
  }
  // Sent at once, like the descriptor: a crash in init must not lose them.
  if (!plugin.warnings.empty()) {
    write_all(fd, "warnings " + json(plugin.warnings).dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  }
  result["descriptor"] = descriptor_json(plugin.descriptor);
  // Sent before init, so a plugin that crashes there is still described.
  write_all(fd, "descriptor " + result["descriptor"].dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  // A plugin with a required option that no config sets here (collab's
  // target_batch_size) cannot be initialised by a listing; it loaded and
  // negotiated, which is what the listing can vouch for.
  for (const auto& option : plugin.descriptor.options) {
    if (!option.default_value && !configured.count(option.name)) {
      result["state"] = "ok";
      write_all(fd, "result " + result.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
      _exit(0);
    }
  }
  write_all(fd, "phase init\n");
  std::unique_ptr<PluginHostContext> services;
  try {
    services = make_host_context(nullptr, c, plugin.descriptor, configured, job.rank, job.world_size, job.local_rank);
  } catch (const std::exception& e) {
    result["state"] = "unavailable";
    result["reason"] = e.what();
    write_all(fd, "result " + result.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    _exit(0);
  }
  char why[1024] = {0};
  loom_status status;
  if (c.kind == LOOM_KIND_COLLECTIVE) {
    auto* vt = static_cast<const loom_collective_v1*>(plugin.vtable);
    loom_collective_ctx* ctx = nullptr;
    status = vt->init(&services->table, &ctx, why, sizeof why);
    if (status == LOOM_OK && ctx != nullptr) vt->fini(ctx);
  } else {
    auto* vt = static_cast<const loom_strategy_v1*>(plugin.vtable);
    loom_strategy_ctx* ctx = nullptr;
    status = vt->init(&services->table, &ctx, why, sizeof why);
    if (status == LOOM_OK && ctx != nullptr) vt->fini(ctx);
  }
  why[sizeof why - 1] = '\0';
  if (status == LOOM_OK) {
    result["state"] = "ok";
  } else if (status == LOOM_ERR_UNAVAILABLE) {
    result["state"] = "unavailable";
    result["reason"] = why[0] ? why : "the plugin gave no reason";
  } else {
    result["reason"] = std::string("init failed (") + loom_status_name(status) + "): " + (why[0] ? why : "no reason given");
  }
  write_all(fd, "result " + result.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  _exit(0);
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

}  // namespace

PluginRecord Host::probe(const PluginCandidate& c) const {
  PluginRecord record;
  record.candidate = c;
  record.warnings = plugin_file_warnings(c.path);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    record.reason = std::string("cannot create a pipe to probe it: ") + std::strerror(errno);
    return record;
  }
  std::map<std::string, std::string> configured;
  if (auto it = config_.options.find({c.kind, c.name}); it != config_.options.end()) configured = it->second;
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    record.reason = std::string("cannot fork to probe it: ") + std::strerror(errno);
    return record;
  }
  if (pid == 0) {
    close(fds[0]);
    // What a plugin prints while being probed is not part of the listing.
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, STDOUT_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    spdlog::set_level(spdlog::level::off);
    probe_child(fds[1], c, job_, configured);
  }
  close(fds[1]);

  std::string output;
  auto deadline = std::chrono::steady_clock::now() + config_.probe_timeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // EOF: the child exited or closed the pipe
    output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  // The child may have closed the pipe and still hang: bound the wait too.
  int wstatus = 0;
  for (;;) {
    pid_t got = waitpid(pid, &wstatus, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) break;
    if (timed_out || std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      break;
    }
    usleep(1000);
  }

  std::string phase = "loading";
  json result, descriptor;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    if (line.rfind("phase ", 0) == 0) phase = line.substr(6);
    if (line.rfind("result ", 0) == 0) result = json::parse(line.substr(7), nullptr, false);
    if (line.rfind("descriptor ", 0) == 0) descriptor = json::parse(line.substr(11), nullptr, false);
    if (line.rfind("warnings ", 0) == 0) {
      json list = json::parse(line.substr(9), nullptr, false);
      for (const auto& w : list.is_array() ? list : json::array()) {
        if (w.is_string()) record.warnings.push_back(w.get<std::string>());
      }
    }
    start = end + 1;
  }
  if (result.is_object() && !timed_out) {
    std::string state = result.value("state", "broken");
    record.state = state == "ok" ? PluginRecord::State::kOk
                   : state == "unavailable" ? PluginRecord::State::kUnavailable
                                            : PluginRecord::State::kBroken;
    record.reason = result.value("reason", "");
    if (result.contains("descriptor")) record.descriptor = descriptor_from_json(result["descriptor"]);
    return record;
  }
  if (descriptor.is_object()) record.descriptor = descriptor_from_json(descriptor);
  if (timed_out) {
    record.reason = "did not finish " + phase + " within " + std::to_string(config_.probe_timeout.count() / 1000) +
                    " s (killed)";
  } else if (WIFSIGNALED(wstatus)) {
    record.reason = "crashed with " + signal_name(WTERMSIG(wstatus)) + " during " + phase;
  } else {
    record.reason = "probe exited with code " + std::to_string(WEXITSTATUS(wstatus)) + " during " + phase;
  }
  return record;
}

std::vector<PluginRecord> Host::probe_all() const {
  std::vector<PluginRecord> records;
  for (const auto& c : candidates_) {
    const PluginCandidate* winner = find(c.kind, c.name);
    if (winner != nullptr && winner->path != c.path) {
      PluginRecord shadowed;
      shadowed.candidate = c;
      shadowed.state = PluginRecord::State::kShadowed;
      shadowed.reason = "by " + winner->path;
      records.push_back(std::move(shadowed));
      continue;
    }
    records.push_back(probe(c));
  }
  return records;
}

}  // namespace loom
