// loom/launch.hpp: start N local processes of one job, torchrun style.
//
// Each process gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT; each line it prints is prefixed with "[rank R] ". When a rank
// fails (non-zero exit or a signal), the others are stopped (SIGTERM, then
// SIGKILL after a grace period) unless keep_going is set.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace loom {

struct LaunchOptions {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port, picked now
  bool keep_going = false;  // let the other ranks run on when one fails
  std::chrono::milliseconds grace{std::chrono::seconds(5)};  // SIGTERM to SIGKILL
  std::chrono::milliseconds timeout{0};  // 0: none; else stop every rank after this long
  std::vector<std::string> command;
};

// How the job ended, and a sentence for each rank that did not succeed.
struct LaunchResult {
  int exit_code = 0;  // 0 when every rank exited 0, else 1
  std::vector<std::string> failures;
};

// Runs the job to its end. Throws Error::usage for a command that cannot be
// found or options out of range.
LaunchResult launch(const LaunchOptions& options);

// A TCP port below the kernel's ephemeral range (so outgoing connections
// never take it), free on every address a moment ago.
int pick_free_port();

}  // namespace loom
