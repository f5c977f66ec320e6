// SPDX-License-Identifier: Apache-2.0
// `loom swarm keygen FILE`: a new swarm key for the collab strategy's
// `swarm_key` option (plugins/common/swarm_key.h holds the format).
// `loom swarm status ...`: runs the collab plugin's observer,
// loom-swarm-status (it links OpenDHT, so loom itself does not).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <vector>

#include "check_kit.hpp"

#include "commands.hpp"
#include "swarm_key.h"

namespace loom::cli {

void add_swarm_command(CLI::App& app, Runner* run) {
  auto* swarm = app.add_subcommand("swarm", "Tools for collab swarms");
  swarm->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  auto* keygen = swarm->add_subcommand(
      "keygen", "Write a new swarm key to FILE (mode 0600): only peers holding it can join, read or average with the swarm");
  keygen->add_option("file", *path, "Where to write the key (must not exist)")->required();
  keygen->callback([=] {
    *run = [=] {
      std::string why;
      bool exists = false;
      if (!loom_key::write_new_key(*path, &why, &exists)) {
        std::cerr << "loom swarm keygen: " << why << "\n";
        return exists ? 2 : 1;
      }
      std::cout << "wrote a new swarm key to " << *path
                << " (mode 0600). Give this file to every peer of the swarm: swarm_key = \"" << *path
                << "\" under [strategy.options], or LOOM_SWARM_KEY=" << *path
                << ". Whoever holds it can join the swarm; keep it as you keep a private key.\n";
      return 0;
    };
  });

  // Listed for --help only: main() hands `loom swarm status ...` to
  // run_swarm_status before parsing, because every argument after it is
  // the observer's own (it parses and explains them).
  swarm->add_subcommand(
      "status",
      "Show a running swarm live as an observer that never trains: peers, epochs, samples/s, loss, rounds "
      "(--initial-peers HOST:PORT --run-id ID [--json] [--csv FILE] [--once]; `loom swarm status --help` lists all)");
}

int run_swarm_status(const std::vector<std::string>& args) {
  std::string where;
  const std::string tool = find_beside_loom("loom-swarm-status", &where);
  if (tool.empty()) {
    std::cerr << "loom swarm status: the collab plugin's observer (loom-swarm-status) is not installed (looked for "
              << where << "); install the loom-plugin-collab package, or build the collab plugin\n";
    return 2;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(tool.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  ::execv(tool.c_str(), argv.data());
  std::cerr << "loom swarm status: cannot run " << tool << ": " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace loom::cli
