// SPDX-License-Identifier: Apache-2.0
// loom/job.hpp: which job this process belongs to, read once from the
// launcher's environment.
//
// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) come first; under mpirun, Open MPI's OMPI_COMM_WORLD_* fill in
// what they leave unset. A process started alone is rank 0 of 1.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

struct JobInfo {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;
  std::string master_addr;  // empty: no rendezvous store configured
  int32_t master_port = 0;
  std::string launcher;     // "torchrun-env", "mpirun" or "none"

  // Reads the environment. Throws Error::usage naming the variable when one
  // is set but malformed (RANK=abc, RANK >= WORLD_SIZE, MASTER_PORT=99999).
  static JobInfo from_environment();
};

}  // namespace loom
