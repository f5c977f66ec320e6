// SPDX-License-Identifier: Apache-2.0
// loom/store.hpp: the key-value rendezvous store every process of a job
// shares (c10d's Store semantics: set, get-with-wait, add).
//
// Static jobs use LibTorch's c10d::TCPStore at MASTER_ADDR:MASTER_PORT,
// served by rank 0, or by `loom launch` when LOOM_STORE_HOSTED=1 (then every
// rank is a client); a job of one process without MASTER_ADDR uses an
// in-process store. Thread safety: every method may be called concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/status.hpp"

namespace loom {

struct JobInfo;

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits up to timeout for key to exist; LOOM_ERR_TIMEOUT if it does not.
  virtual Status get(const std::string& key, std::vector<uint8_t>* value, std::chrono::milliseconds timeout) = 0;
  // Adds delta to the integer at key (0 if absent); *result gets the new value.
  virtual Status add(const std::string& key, int64_t delta, int64_t* result) = 0;
};

// An in-process store, for jobs of one process and for tests.
std::unique_ptr<Store> make_memory_store();

// Connects to (rank 0: serves) the TCPStore of the job. Throws Error::runtime
// naming the address when it cannot be reached within timeout.
std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                                      std::chrono::milliseconds timeout);

// The job's store: TCP when MASTER_ADDR is set (rank 0 serves it unless
// LOOM_STORE_HOSTED=1), in-process for a job of one,
// nullptr otherwise (a multi-process job without a rendezvous address).
std::unique_ptr<Store> make_job_store(const JobInfo& job, std::chrono::milliseconds timeout);

}  // namespace loom
