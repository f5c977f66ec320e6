// SPDX-License-Identifier: Apache-2.0
// loom: the command line. Exit codes: 0 ok, 1 run-time failure, 2 usage or
// configuration error.
#include <spdlog/spdlog.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <iostream>

#include "commands.hpp"
#include "loom/config.hpp"
#include "loom/version.hpp"

namespace loom::cli {

std::unique_ptr<Host> make_host(const GlobalOptions& global) {
  HostConfig config;
  std::vector<std::string> config_paths;
  if (!global.config.empty()) {
    HostFileConfig file = load_host_config(global.config);
    config_paths = file.plugin_paths;
    config.options = file.options;
    config.option_sources = file.option_sources;
  }
  config.search_path = plugin_search_path(global.plugin_paths, config_paths);
  return std::make_unique<Host>(std::move(config), JobInfo::from_environment());
}

}  // namespace loom::cli

int main(int argc, char** argv) {
  using namespace loom::cli;
  spdlog::set_default_logger(spdlog::stderr_color_mt("loom"));
  spdlog::set_pattern("[%l] %v");
  if (argc >= 3 && std::string(argv[1]) == "swarm" && std::string(argv[2]) == "status")
    return run_swarm_status(std::vector<std::string>(argv + 3, argv + argc));

  CLI::App app("Loom: a training runtime for LibTorch with plugin strategies and collectives", "loom");
  app.set_version_flag("--version", std::string("loom ") + LOOM_VERSION_STRING + " (plugin ABI " +
                                        std::to_string(LOOM_ABI_MAJOR) + "." + std::to_string(LOOM_ABI_MINOR) + ")");
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  GlobalOptions global;
  app.add_option("--plugin-path", global.plugin_paths, "Folder(s) to search for plugins first (colon-separated)");
  app.add_option("--config", global.config, "TOML config file ([plugins] path, [collective])")->check(CLI::ExistingFile);
  app.add_option("--log-level", global.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  Runner run;
  add_plugins_command(app, global, &run);
  add_bench_command(app, global, &run);
  add_launch_command(app, &run);
  add_train_command(app, global, &run);
  add_swarm_command(app, &run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(global.log_level));
  try {
    return run ? run() : 2;
  } catch (const loom::Error& e) {
    std::cerr << "loom: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "loom: error: " << e.what() << "\n";
    return 1;
  }
}
