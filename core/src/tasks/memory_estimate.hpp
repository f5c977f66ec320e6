// SPDX-License-Identifier: Apache-2.0
// tasks/memory_estimate.hpp: refuses a built-in task whose options ask for
// more memory than the machine has, before anything is allocated (internal).
//
// Training with Adam holds four floats per parameter (weights, gradients, two
// moments), so a task needs about 16 bytes per parameter plus its data. The
// estimates work in double, so options up to INT64_MAX give a (huge) number
// rather than an overflow. Thread safety: pure functions of their arguments
// and /proc/meminfo.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "builtin.hpp"

namespace loom::train::tasks {

struct MemoryEstimate {
  double parameters = 0;
  double data_bytes = 0;                // data sets and, for charlm, one sample's attention maps
  std::vector<std::string> size_options;  // the options the estimate depends on, for the message
};

MemoryEstimate estimate_charlm(const Options& options);
MemoryEstimate estimate_teacher(const Options& options);
MemoryEstimate estimate_digits(const Options& options);

// MemTotal from /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t machine_memory_bytes();

// Throws Error::usage ("file:line: option 'd_model' for task 'charlm' is too
// large for this machine: with ..., d_model = 100000, ... the task would need
// about 1281 GB (8.0e+10 parameters, ...); this machine has 24 GB") when
// parameters * 16 + data_bytes exceeds machine_bytes; machine_bytes 0: no check.
void check_memory(const Options& options, const MemoryEstimate& estimate, uint64_t machine_bytes = machine_memory_bytes());

}  // namespace loom::train::tasks
