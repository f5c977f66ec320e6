// SPDX-License-Identifier: Apache-2.0
#include "stop.hpp"

#include <signal.h>

#include <atomic>

namespace loom {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");

extern "C" void on_stop_signal(int signo) {
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, signo)) return;
  // The second signal: the default action (termination by that signal).
  signal(signo, SIG_DFL);
  raise(signo);
}

}  // namespace

int stop_signal() noexcept { return g_stop_signal.load(); }

std::string signal_name(int signo) {
  if (signo == SIGINT) return "SIGINT";
  if (signo == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signo);
}

struct StopOnSignals::Saved {
  struct sigaction int_action {}, term_action {};
};

StopOnSignals::StopOnSignals() : saved_(std::make_unique<Saved>()) {
  g_stop_signal = 0;
  struct sigaction stop {};
  stop.sa_handler = on_stop_signal;
  sigemptyset(&stop.sa_mask);
  stop.sa_flags = SA_RESTART;  // blocking calls go on; the trainer and plugins poll the request
  sigaction(SIGINT, &stop, &saved_->int_action);
  sigaction(SIGTERM, &stop, &saved_->term_action);
}

StopOnSignals::~StopOnSignals() {
  sigaction(SIGINT, &saved_->int_action, nullptr);
  sigaction(SIGTERM, &saved_->term_action, nullptr);
}

}  // namespace loom
