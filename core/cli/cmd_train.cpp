// SPDX-License-Identifier: Apache-2.0
// `loom train CONFIG [--set section.key=value ...] [--resume]`, and
// `loom train --help-task NAME`.
#include <spdlog/spdlog.h>

#include <iostream>

#include "commands.hpp"
#include "loom/train/task_options.hpp"
#include "loom/train/trainer.hpp"

namespace loom::cli {

void add_train_command(CLI::App& app, const GlobalOptions& global, Runner* run) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    train::TrainRequest request;
    std::string help_task;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "Train a model as the config file says");
  auto* config = cmd->add_option("config", args->config, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--help-task", args->help_task, "List the [task] options of a task (digits, torchscript, ...) and exit")
      ->excludes(config);
  cmd->add_option("--set", args->overrides, "Override a config value: section.key=value (repeatable)");
  cmd->add_flag("--resume", args->request.resume, "Continue from <output_dir>/checkpoint.pt");
  cmd->add_option("--dump-init", args->request.dump_init_dir, "Write initial parameters, data and sample order here");
  cmd->add_option("--dump-final", args->request.dump_final_dir, "Write the final parameters here");
  cmd->callback([args, &global, run] {
    *run = [args, &global] {
      if (!args->help_task.empty()) {
        std::printf("[task] options of task '%s':\n", args->help_task.c_str());
        for (const auto& o : train::task_options(args->help_task)) {
          std::printf("  %-16s %-7s default %-10s %s\n", o.name.c_str(), o.type.c_str(),
                      o.default_value.empty() ? "(none)" : ("\"" + o.default_value + "\"").c_str(), o.help.c_str());
        }
        return 0;
      }
      if (args->config.empty()) throw Error::usage("loom train: a config file is required (or --help-task NAME)");
      if (global.log_level == "warn") spdlog::set_level(spdlog::level::info);  // training reports progress by default
      train::TrainConfig config = train::load_train_config(args->config, args->overrides, global.plugin_paths);
      args->request.stop_on_signals = true;
      train::TrainResult result = train::run_training(config, args->request);
      if (!result.stopped_by.empty()) {
        // A stop the user asked for is not a failure: the work so far is kept.
        std::printf("stopped by %s after %lld steps\n", result.stopped_by.c_str(),
                    static_cast<long long>(result.steps));
        if (!result.checkpoint.empty()) std::printf("checkpoint: %s (--resume continues from it)\n", result.checkpoint.c_str());
        return 0;
      }
      if (result.global_zero) {
        auto it = result.metrics.find(result.headline);
        if (it != result.metrics.end()) {
          std::printf("final %s: %.4f after %lld steps\n", result.headline.c_str(), it->second,
                      static_cast<long long>(result.steps));
        } else {
          std::printf("finished after %lld steps\n", static_cast<long long>(result.steps));
        }
        if (!result.checkpoint.empty()) std::printf("checkpoint: %s\n", result.checkpoint.c_str());
      }
      return 0;
    };
  });
}

}  // namespace loom::cli
