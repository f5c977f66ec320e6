// SPDX-License-Identifier: Apache-2.0
// The `loom` subcommands. Each registers itself on the CLI11 app and returns
// a runner; the runner returns the process exit code or throws loom::Error.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/host.hpp"

namespace loom::cli {

// Options every subcommand shares.
struct GlobalOptions {
  std::vector<std::string> plugin_paths;  // --plugin-path
  std::string config;                     // --config
  std::string log_level = "warn";         // --log-level
};

// Builds the host from the global options (config file, search path, job).
std::unique_ptr<Host> make_host(const GlobalOptions& global);

// The plugin NAME names (kind_word "" for either kind); Error::usage listing
// what exists when none does, or when it names one of each kind.
const PluginCandidate& select_plugin(const Host& host, const std::string& name, const std::string& kind_word);

using Runner = std::function<int()>;

// Each add_* registers its subcommand and sets *run when that subcommand is chosen.
void add_plugins_command(CLI::App& app, const GlobalOptions& global, Runner* run);
void add_bench_command(CLI::App& app, const GlobalOptions& global, Runner* run);
void add_launch_command(CLI::App& app, Runner* run);
void add_train_command(CLI::App& app, const GlobalOptions& global, Runner* run);
void add_swarm_command(CLI::App& app, Runner* run);
// `loom swarm status ARGS...`: runs the collab plugin's observer with ARGS
// (exec; returns only when it cannot: 2 when it is not installed).
int run_swarm_status(const std::vector<std::string>& args);

}  // namespace loom::cli
