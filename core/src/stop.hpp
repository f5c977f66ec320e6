// SPDX-License-Identifier: Apache-2.0
// A graceful stop of this process: `loom train` turns its first SIGINT or
// SIGTERM into a request that the trainer honours at the next step boundary
// and that plugins see through loom_host_v1.stop_requested (ABI 1.9), so a
// swarm peer leaves its swarm well rather than dying mid-round.
#pragma once

#include <memory>
#include <string>

namespace loom {

// The signal that asked this process to stop (SIGINT, SIGTERM), or 0.
int stop_signal() noexcept;
// "SIGINT", "SIGTERM" (or "signal N") for stop_signal()'s value.
std::string signal_name(int signo);

// While alive: the first SIGINT or SIGTERM records a stop request; a second
// one ends the process at once, as it would have without this (the user
// insists). The previous handlers come back at destruction.
class StopOnSignals {
 public:
  StopOnSignals();
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace loom
