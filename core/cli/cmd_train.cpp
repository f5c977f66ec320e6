// `loom train CONFIG [--set section.key=value ...] [--resume]`.
#include <spdlog/spdlog.h>

#include <iostream>

#include "commands.hpp"
#include "loom/train/trainer.hpp"

namespace loom::cli {

void add_train_command(CLI::App& app, const GlobalOptions& global, Runner* run) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    train::TrainRequest request;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "Train a model as the config file says");
  cmd->add_option("config", args->config, "TOML config file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "Override a config value: section.key=value (repeatable)");
  cmd->add_flag("--resume", args->request.resume, "Continue from <output_dir>/checkpoint.pt");
  cmd->add_option("--dump-init", args->request.dump_init_dir, "Write initial parameters, data and sample order here");
  cmd->add_option("--dump-final", args->request.dump_final_dir, "Write the final parameters here");
  cmd->callback([args, &global, run] {
    *run = [args, &global] {
      if (global.log_level == "warn") spdlog::set_level(spdlog::level::info);  // training reports progress by default
      train::TrainConfig config = train::load_train_config(args->config, args->overrides, global.plugin_paths);
      train::TrainResult result = train::run_training(config, args->request);
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
