// SPDX-License-Identifier: Apache-2.0
// job.hpp: a multi-process job of ucx_rank helpers for the driver: a store
// server on a free loopback port, one child process per rank with its output
// collected, SIGKILL on demand, and every child killed and reaped when the
// Job goes away, whatever path the test took.
//
// Thread safety: one thread uses a Job.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/store.hpp"

namespace ucx_test {

using Clock = std::chrono::steady_clock;

class Job {
 public:
  // Starts `size` ranks of ucx_rank running `scenario` with extra arguments.
  Job(int size, const std::string& scenario, const std::vector<std::string>& extra);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  loom::Store& store() { return *store_; }
  int size() const { return int(ranks_.size()); }

  // Waits until rank printed "RESULT key ..."; false at the deadline or if it exited.
  bool wait_for(int rank, const std::string& key, std::chrono::milliseconds timeout);
  // SIGKILLs rank; returns CLOCK_MONOTONIC at the kill, in ns.
  int64_t kill(int rank);
  // Leaves rank unreaped once it exits (a zombie, as under a launcher that
  // waits on another child first) until wait_exit(rank) or the end.
  void hold(int rank) { ranks_[size_t(rank)].held = true; }
  pid_t pid(int rank) const { return ranks_[size_t(rank)].pid; }
  // Waits for rank to exit; its exit code, or -1 (killed at the deadline, or by a signal).
  int wait_exit(int rank, std::chrono::milliseconds timeout);

  // The value of "RESULT key value" from rank, or "" if it printed none.
  std::string result(int rank, const std::string& key) const;
  // Everything rank printed (for failure messages).
  const std::string& output(int rank) const { return ranks_[size_t(rank)].out; }

 private:
  struct Child {
    pid_t pid = -1;
    int fd = -1;  // read end of its stdout + stderr
    std::string out, partial;
    std::map<std::string, std::string> results;
    bool exited = false;
    bool held = false;  // not reaped by pump (hold)
    int status = 0;
  };
  // Reads whatever the children printed, waiting at most `wait`.
  void pump(std::chrono::milliseconds wait);
  void reap(Child& c, bool block);

  std::unique_ptr<loom::Store> store_;
  std::vector<Child> ranks_;
};

// CLOCK_MONOTONIC in ns (the helpers report the same clock).
int64_t monotonic_ns();

}  // namespace ucx_test
