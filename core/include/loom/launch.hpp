// SPDX-License-Identifier: Apache-2.0
// loom/launch.hpp: start N local processes of one job, torchrun style.
//
// Each process gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// and LOOM_STORE_HOSTED=1: the launcher serves the job's rendezvous store
// (c10d's TCPStore protocol) on MASTER_ADDR:MASTER_PORT only, from before the
// ranks start to the job's end, so every rank is a client of it (rank 0
// starts no store server). Each line a rank prints is prefixed with
// "[rank R] ". When a rank fails (non-zero exit or a signal), the others are
// stopped (SIGTERM, then SIGKILL after a grace period) unless keep_going is
// set.
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
// found, options out of range or a master_addr that is no address of this
// machine, and Error::runtime when the store cannot listen there.
LaunchResult launch(const LaunchOptions& options);

// A TCP port below the kernel's ephemeral range (so outgoing connections
// never take it), free on every address a moment ago.
int pick_free_port();

}  // namespace loom
