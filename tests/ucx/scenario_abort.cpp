// SPDX-License-Identifier: Apache-2.0
// scenario_abort.cpp: rank 0 aborts its communicator from a second thread
// while its main thread is inside large allreduces (64 MiB: the ranks then
// read each other's memory in long loops, cross-memory attach on one host).
// Rank 0 reports how long the abort took to end its allreduce; every other
// rank reports how its own allreduce ended (it waits for a rank that left).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "rank_common.hpp"

namespace ucx_rank {

int scenario_abort_during_allreduce(Rank& rk) {
  using Clock = std::chrono::steady_clock;
  const Args& a = rk.args();
  std::unique_ptr<loom::Communicator> comm = rk.world();
  if (!comm) return 1;
  const size_t count = size_t(16) << 20;  // 64 MiB of f32
  std::vector<float> send(count, float(a.rank + 1)), recv(count);
  std::atomic<int64_t> aborted_at_ns{0};
  std::thread aborter;
  if (a.rank == 0) {
    aborter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      aborted_at_ns = monotonic_ns();
      const loom::Status st = comm->abort();
      if (!st.is_ok()) report("error", "\"abort: " + st.to_string() + "\"");
    });
  }
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  int rounds = 0;
  loom::Status s;
  while (s.is_ok() && Clock::now() < give_up) {
    // In place and out of place in turn: both ways of the two-rank allreduce.
    float* out = rounds % 2 ? send.data() : recv.data();
    s = comm->allreduce(send.data(), out, count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
    ++rounds;
  }
  const int64_t ended_ns = monotonic_ns();
  if (aborter.joinable()) aborter.join();
  report("rounds", std::to_string(rounds));
  report("ended_code", loom_status_name(s.code()));
  report("ended_message", "\"" + s.message() + "\"");
  if (a.rank == 0) report("abort_to_end_ms", std::to_string(double(ended_ns - aborted_at_ns.load()) / 1e6));
  comm.reset();
  return 0;
}

}  // namespace ucx_rank
