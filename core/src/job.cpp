// SPDX-License-Identifier: Apache-2.0
#include "loom/job.hpp"

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "loom/status.hpp"

namespace loom {
namespace {

// The integer in variable name, or nullopt when unset; throws on junk.
std::optional<long> int_env(const char* name, long min, long max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) {
    throw Error::usage(std::string("environment variable ") + name + "=" + excerpt(text) + " is not valid: expected an integer from " +
                       std::to_string(min) + " to " + std::to_string(max));
  }
  return value;
}

}  // namespace

JobInfo JobInfo::from_environment() {
  JobInfo job;
  job.launcher = "none";
  auto rank = int_env("RANK", 0, 1 << 24);
  auto world = int_env("WORLD_SIZE", 1, 1 << 24);
  auto local = int_env("LOCAL_RANK", 0, 1 << 24);
  if (rank || world) job.launcher = "torchrun-env";
  if (!rank) rank = int_env("OMPI_COMM_WORLD_RANK", 0, 1 << 24);
  if (!world) world = int_env("OMPI_COMM_WORLD_SIZE", 1, 1 << 24);
  if (!local) local = int_env("OMPI_COMM_WORLD_LOCAL_RANK", 0, 1 << 24);
  if (job.launcher == "none" && (rank || world)) job.launcher = "mpirun";
  job.rank = static_cast<int32_t>(rank.value_or(0));
  job.world_size = static_cast<int32_t>(world.value_or(1));
  job.local_rank = static_cast<int32_t>(local.value_or(job.rank));
  if (job.rank >= job.world_size) {
    throw Error::usage("RANK=" + std::to_string(job.rank) + " is not valid with WORLD_SIZE=" +
                       std::to_string(job.world_size) + ": RANK must be below WORLD_SIZE");
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    job.master_addr = addr;
    auto port = int_env("MASTER_PORT", 1, 65535);
    if (!port) throw Error::usage("MASTER_ADDR is set but MASTER_PORT is not: set MASTER_PORT to a port from 1 to 65535");
    job.master_port = static_cast<int32_t>(*port);
  }
  return job;
}

}  // namespace loom
