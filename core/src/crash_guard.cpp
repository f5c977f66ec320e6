// SPDX-License-Identifier: Apache-2.0
#include "crash_guard.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace loom {
namespace {

// Formatted before the guarded call: a signal handler may not allocate.
char g_message[1024];
size_t g_length = 0;
int g_depth = 0;
std::recursive_mutex g_mutex;
// A crash from a stack overflow needs a stack of its own to report on.
alignas(16) char g_alt_stack[64 * 1024];

void set_message(const std::string& text) {
  g_length = std::min(text.size(), sizeof g_message);
  std::memcpy(g_message, text.data(), g_length);
}

void on_fatal_signal(int signo) {
  const char* name = signo == SIGSEGV ? "SIGSEGV" : signo == SIGBUS ? "SIGBUS" : signo == SIGILL ? "SIGILL"
                   : signo == SIGFPE  ? "SIGFPE" : "SIGABRT";
  ssize_t ignored = write(STDERR_FILENO, g_message, g_length);
  ignored = write(STDERR_FILENO, name, strlen(name));
  ignored = write(STDERR_FILENO, ")\n", 2);
  (void)ignored;
  _exit(2);
}

}  // namespace

CrashGuard::CrashGuard(const std::string& message) : lock_(g_mutex) {
  outer_message_.assign(g_message, g_length);
  set_message("loom: error: " + message + " (signal ");
  outermost_ = g_depth++ == 0;
  if (!outermost_) return;  // the outer guard's handlers are in place
  stack_t alt{};
  alt.ss_sp = g_alt_stack;
  alt.ss_size = sizeof g_alt_stack;
  sigaltstack(&alt, nullptr);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_ONSTACK;
  for (size_t i = 0; i < 5; ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

CrashGuard::~CrashGuard() {
  --g_depth;
  set_message(outer_message_);
  if (!outermost_) return;
  for (size_t i = 0; i < 5; ++i) {
    // A plugin may install its own handlers during init (Open MPI and UCX do):
    // restore ours only where ours is still in place.
    struct sigaction current {};
    sigaction(kSignals[i], nullptr, &current);
    if (current.sa_handler == on_fatal_signal) sigaction(kSignals[i], &previous_[i], nullptr);
  }
}

}  // namespace loom
