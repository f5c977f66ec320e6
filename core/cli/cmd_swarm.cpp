// SPDX-License-Identifier: Apache-2.0
// `loom swarm keygen FILE`: a new swarm key for the collab strategy's
// `swarm_key` option (plugins/common/swarm_key.h holds the format).
#include <iostream>

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
}

}  // namespace loom::cli
