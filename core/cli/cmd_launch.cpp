// SPDX-License-Identifier: Apache-2.0
// `loom launch -n N -- CMD ...`: N local processes of one job, torchrun style.
#include <iostream>

#include "commands.hpp"
#include "loom/launch.hpp"

namespace loom::cli {

void add_launch_command(CLI::App& app, Runner* run) {
  auto options = std::make_shared<LaunchOptions>();
  auto timeout_s = std::make_shared<double>(0);
  auto grace_s = std::make_shared<double>(5);
  auto* cmd = app.add_subcommand("launch", "Start N local processes of one job (RANK, WORLD_SIZE, MASTER_ADDR/PORT set)");
  cmd->add_option("-n,--nproc", options->nproc, "Number of processes")->required()->check(CLI::Range(1, 1024));
  cmd->add_option("--master-addr", options->master_addr, "Rendezvous address given to every rank");
  cmd->add_option("--master-port", options->master_port, "Rendezvous port (default: a free one)")->check(CLI::Range(1, 65535));
  cmd->add_flag("--keep-going", options->keep_going, "Let the other ranks run on when one fails");
  cmd->add_option("--timeout", *timeout_s, "Stop every rank after this many seconds (0: never)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--grace", *grace_s, "Seconds between SIGTERM and SIGKILL when stopping ranks")->check(CLI::NonNegativeNumber);
  cmd->add_option("command", options->command, "The command each rank runs (after --)")->required();
  cmd->callback([=] {
    *run = [=] {
      options->timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000));
      options->grace = std::chrono::milliseconds(static_cast<int64_t>(*grace_s * 1000));
      LaunchResult result = loom::launch(*options);
      if (result.exit_code != 0) {
        std::cerr << "loom launch: the job failed: ";
        for (size_t i = 0; i < result.failures.size(); ++i) std::cerr << (i ? "; " : "") << result.failures[i];
        std::cerr << "\n";
      }
      return result.exit_code;
    };
  });
}

}  // namespace loom::cli
