// SPDX-License-Identifier: Apache-2.0
// world.hpp: the plugin under test and the world communicator every case
// runs on, set up once by main() from the command line.
//
// Thread safety: open() and close() run on the main thread before and after
// the tests; the accessors may then be called from any thread (the
// communicator itself follows loom/collective.h's rules).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loom/collective.hpp"
#include "loom/host.hpp"

namespace conformance {

struct SuiteOptions {
  std::string plugin;                      // --plugin NAME
  std::vector<std::string> plugin_paths;   // --plugin-path DIR (repeatable)
  int64_t timeout_ms = 20000;              // --timeout-ms N: every wait's bound
  std::string device = "cpu";              // --device cpu|cuda: where buffers live
  int device_id = 0;                       // the CUDA device (the local rank's), for --device cuda
  std::map<std::string, std::string> plugin_options;  // --option KEY=VALUE (repeatable)
  std::string report;                      // --report PREFIX: PREFIX.<rank>.jsonl
};

class World {
 public:
  // Loads the plugin and creates the world communicator (collective over all
  // ranks). Throws loom::Error when the plugin cannot be opened or the
  // communicator cannot be created.
  static void open(const SuiteOptions& options);
  // Destroys the communicator, the plugin instance and the host, in order.
  static void close();

  static const SuiteOptions& options();
  static loom::Host& host();
  static loom::Collective& collective();
  static loom::Communicator& comm();
  static int rank();
  static int size();
  static int64_t timeout_ms() { return options().timeout_ms; }

  // A further communicator over the same ranks (collective over all ranks),
  // whose waits are bounded by timeout_ms (0: the suite's timeout).
  static loom::Status create_comm(const std::string& name, std::unique_ptr<loom::Communicator>* comm,
                                  int64_t timeout_ms = 0);
};

// Skips the case unless the plugin offers every operation in ops (LOOM_OP_*
// bits): what a plugin declares absent (absent_ops, ABI 1.7) is reported as
// skipped, naming the operations, not failed.
#define CONFORMANCE_NEEDS(ops)                                                                 \
  do {                                                                                         \
    if (!::conformance::World::collective().offers(ops))                                       \
      GTEST_SKIP() << "declared absent by the plugin: " << ::conformance::absent_names(ops); \
  } while (0)
// The names of the operations in ops that the plugin declares absent.
std::string absent_names(uint64_t ops);
// Whether the plugin offers every operation in ops.
inline bool offered(uint64_t ops) { return World::collective().offers(ops); }

// An allreduce of one i32 over comm (a Buffer, so in --device cuda memory too)
// sums to its size.
testing::AssertionResult still_works(loom::Communicator& comm);

// gtest predicates for statuses: the message carries Status::to_string().
testing::AssertionResult is_ok(const loom::Status& status);
testing::AssertionResult has_code(const loom::Status& status, loom_status code);

}  // namespace conformance
