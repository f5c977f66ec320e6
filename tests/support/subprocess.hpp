// SPDX-License-Identifier: Apache-2.0
// Runs a program as a child process for tests: captures stdout and stderr,
// kills it at a deadline, and reports how it ended.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace loom::test {

struct ProcessResult {
  int exit_code = -1;     // when it exited
  int signal = 0;         // when a signal ended it
  bool timed_out = false; // killed at the deadline
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with the current environment plus env (an empty
// value unsets the variable), for at most timeout.
ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A child left running: for tests that kill processes mid-work. Its output
// goes to log_path (or /dev/null). The destructor SIGKILLs and reaps it.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
        const std::string& log_path = "");
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int pid() const { return pid_; }
  bool running();  // false once it has ended (and was reaped)
  void kill(int signo);
  // Waits at most timeout for it to end; the wait status, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);

 private:
  int pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace loom::test
