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

}  // namespace loom::test
