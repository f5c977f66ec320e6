// SPDX-License-Identifier: Apache-2.0
// scenario_leak.cpp: create, use and destroy a communicator over and over.
// Resident memory, open descriptors and threads are sampled after a warm-up
// (allocator pools and UCX's own caches settle) and at the end; the driver
// judges the growth.
#include <chrono>
#include <cstdlib>
#include <vector>

#include "rank_common.hpp"

namespace ucx_rank {

int scenario_leak(Rank& rk) {
  const Args& a = rk.args();
  const int iterations = a.iterations;
  const int warmup = 100;
  std::vector<float> small(1031), big(1 << 16), out(1 << 16);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 13);
  auto sample = [](const char* when) {
    report(std::string("rss_kib_") + when, std::to_string(rss_kib()));
    report(std::string("fds_") + when, std::to_string(open_fds()));
    report(std::string("threads_") + when, std::to_string(threads()));
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iterations; ++it) {
    if (it == warmup) sample("warm");
    std::unique_ptr<loom::Communicator> comm;
    loom::Status s = rk.make_comm("leak/" + std::to_string(it), a.rank, a.size, &comm);
    // Latency and bandwidth algorithms, and a non-blocking pair.
    if (s.is_ok()) s = comm->allreduce(small.data(), out.data(), small.size(), LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
    if (s.is_ok()) s = comm->allreduce(big.data(), out.data(), big.size(), LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
    if (s.is_ok()) s = comm->barrier();
    if (!s.is_ok()) {
      report("error", "\"iteration " + std::to_string(it) + ": " + s.to_string() + "\"");
      return 1;
    }
  }
  sample("end");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  report("iterations", std::to_string(iterations));
  report("ms_per_iteration", std::to_string(ms / iterations));
  return 0;
}

}  // namespace ucx_rank
