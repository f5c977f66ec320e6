// SPDX-License-Identifier: Apache-2.0
// CrashGuard: while alive, a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
// SIGABRT) in this process prints a prepared message naming the plugin and
// ends the process with exit code 2, instead of a bare crash. Used around
// calls into a plugin's load and init. Internal to libloom.
#pragma once

#include <csignal>
#include <mutex>
#include <string>

namespace loom {

class CrashGuard {
 public:
  // message: "plugin 'x' (/path/libx_collective.so) crashed during init"
  explicit CrashGuard(const std::string& message);
  ~CrashGuard();
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

 private:
  static constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  // Guards nest (a strategy opening its collective inside init) and may be
  // taken on several threads: one guarded section at a time, messages stacked.
  std::unique_lock<std::recursive_mutex> lock_;
  std::string outer_message_;
  bool outermost_ = false;
  struct sigaction previous_[5];
};

}  // namespace loom
