// SPDX-License-Identifier: Apache-2.0
// loom/status.hpp: the result of a call into a plugin, and the exception the
// core throws for errors a user must see.
//
// Status is a small value: a loom_status code and a message (empty when OK).
// Error carries the process exit code DESIGN.md fixes: 1 for a run-time
// failure, 2 for a usage or configuration error.
//
// Thread safety: both are values; const methods may be called concurrently.
#pragma once

#include <stdexcept>
#include <string>

#include "loom/plugin.h"

namespace loom {

class Status {
 public:
  Status() = default;  // OK
  Status(loom_status code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == LOOM_OK; }
  loom_status code() const { return code_; }
  const std::string& message() const { return message_; }
  // "LOOM_ERR_TIMEOUT: wait timed out after 100 ms", or "LOOM_OK".
  std::string to_string() const;

 private:
  loom_status code_ = LOOM_OK;
  std::string message_;
};

class Error : public std::runtime_error {
 public:
  enum ExitCode { kRuntime = 1, kUsage = 2 };

  Error(ExitCode exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}

  // A bad command line, config, option value, or a plugin that cannot be
  // loaded or selected: the user must change something.
  static Error usage(const std::string& message) { return Error(kUsage, message); }
  // Something failed while running.
  static Error runtime(const std::string& message) { return Error(kRuntime, message); }

  int exit_code() const { return exit_code_; }

 private:
  ExitCode exit_code_;
};

// value whole when it is at most max bytes, else its first max bytes and
// "... (N bytes)": messages quote user input through this, so a huge value
// cannot flood the terminal.
std::string excerpt(const std::string& value, size_t max = 80);

// Throws Error::runtime(context + ": " + status) unless status is OK.
void check(const Status& status, const std::string& context);

}  // namespace loom
