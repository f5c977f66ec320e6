// SPDX-License-Identifier: Apache-2.0
// rank_common.hpp: what every scenario of ucx_rank shares: the command line,
// the store client and out-of-band exchange, the plugin with chosen options,
// typed test data, process statistics and the result lines the driver reads.
//
// Thread safety: single-threaded helpers, except where a scenario says.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/collective.hpp"
#include "loom/host.hpp"
#include "loom/store.hpp"

namespace ucx_rank {

struct Args {
  int rank = -1;
  int size = 0;
  int port = 0;
  std::string scenario;
  int64_t timeout_ms = 5000;
  int victim = -1;
  int iterations = 1000;  // leak scenario
  std::map<std::string, std::string> options;  // --option key=value: ucx plugin options
};

// The store client, the plugin instance and communicator factory of a rank.
class Rank {
 public:
  explicit Rank(const Args& args);
  ~Rank();

  const Args& args() const { return args_; }
  loom::Store& store() { return *store_; }
  loom::Collective& collective() { return *collective_; }

  // A communicator among `size` members (this process is `rank`), exchanging
  // addresses under a key prefix of its own.
  loom::Status make_comm(const std::string& prefix, int rank, int size, std::unique_ptr<loom::Communicator>* comm,
                         int64_t timeout_ms = -1);
  // The same over every rank, from another instance of the plugin opened
  // with args().options plus `extra` (extra wins).
  loom::Status make_comm_with(const std::map<std::string, std::string>& extra, const std::string& prefix,
                              std::unique_ptr<loom::Communicator>* comm);
  // Every rank's communicator ("world"); on failure reports "error" and
  // returns null.
  std::unique_ptr<loom::Communicator> world();
  // Opens another instance of the plugin with other options.
  std::shared_ptr<loom::Collective> open_with(const std::map<std::string, std::string>& options);

 private:
  Args args_;
  std::unique_ptr<loom::Store> store_;
  std::vector<std::unique_ptr<loom::Host>> hosts_;
  std::shared_ptr<loom::Collective> collective_;
};

// An out-of-band allgather over the store under prefix.
std::function<loom::Status(const void*, size_t, void*, int64_t)> store_oob(loom::Store* store, const std::string& prefix,
                                                                          int rank, int size);

// Typed buffers of small exact values for checking results in any dtype.
void store_value(loom_dtype dtype, void* base, size_t i, double v);
double load_value(loom_dtype dtype, const void* base, size_t i);

// Process statistics from /proc/self.
long rss_kib();
int open_fds();
int threads();
int64_t monotonic_ns();  // CLOCK_MONOTONIC, comparable across processes

// One result line for the driver: "RESULT <key> <value>".
void report(const std::string& key, const std::string& value);

using Scenario = int (*)(Rank&);
int scenario_kill_during_allreduce(Rank& rank);
int scenario_kill_between_ops(Rank& rank);
int scenario_abort_during_allreduce(Rank& rank);
int scenario_leak(Rank& rank);
int scenario_mismatch(Rank& rank);
int scenario_algorithms(Rank& rank);
int scenario_back_to_back(Rank& rank);

}  // namespace ucx_rank
