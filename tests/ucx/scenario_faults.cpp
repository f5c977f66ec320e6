// SPDX-License-Identifier: Apache-2.0
// scenario_faults.cpp: a rank is SIGKILLed by the driver, during a large
// allreduce or between two operations. Survivors report how and when their
// operation ended (PEER_FAILED or TIMEOUT), destroy the broken communicator
// (timed: it must not wait for the dead), then build a new one among
// themselves through a fresh out-of-band prefix and check an allreduce.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "rank_common.hpp"

namespace ucx_rank {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

void report_failure(const loom::Status& s) {
  report("failed_at_ns", std::to_string(monotonic_ns()));
  report("failed_code", loom_status_name(s.code()));
  report("failed_message", "\"" + s.message() + "\"");
}

// The survivors' new communicator and one checked allreduce on it.
int recover(Rank& rk) {
  const Args& a = rk.args();
  const int rank = a.rank - (a.rank > a.victim ? 1 : 0), size = a.size - 1;
  std::unique_ptr<loom::Communicator> comm;
  const auto t0 = Clock::now();
  loom::Status s = rk.make_comm("survivors", rank, size, &comm);
  if (!s.is_ok()) {
    report("recover_error", "\"" + s.to_string() + "\"");
    return 1;
  }
  report("recover_create_ms", std::to_string(ms_since(t0)));
  const size_t count = 1 << 18;  // the ring, several chunks
  std::vector<float> send(count), recv(count, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = float(rank + 1 + int(i % 7));
  s = comm->allreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
  if (!s.is_ok()) {
    report("recover_error", "\"" + s.to_string() + "\"");
    return 1;
  }
  for (size_t i = 0; i < count; ++i) {
    const float expected = float(size * (size + 1) / 2 + size * int(i % 7));
    if (recv[i] != expected) {
      report("recover_error", "\"element " + std::to_string(i) + " is " + std::to_string(recv[i]) + "\"");
      return 1;
    }
  }
  s = comm->barrier();  // nobody leaves while another still needs it
  if (!s.is_ok()) {
    report("recover_error", "\"barrier: " + s.to_string() + "\"");
    return 1;
  }
  report("recovered", "ok");
  return 0;
}

// Ends the broken communicator and times it.
void destroy(std::unique_ptr<loom::Communicator>& comm) {
  const auto t0 = Clock::now();
  comm.reset();
  report("destroy_ms", std::to_string(ms_since(t0)));
}

}  // namespace

int scenario_kill_during_allreduce(Rank& rk) {
  const Args& a = rk.args();
  std::unique_ptr<loom::Communicator> comm = rk.world();
  if (!comm) return 1;
  const size_t count = size_t(4) << 20;  // 16 MiB of f32
  std::vector<float> send(count, float(a.rank + 1)), recv(count);
  loom::Status s = comm->allreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
  if (!s.is_ok()) {
    report("error", "\"first allreduce: " + s.to_string() + "\"");
    return 1;
  }
  report("ready", "1");
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  int rounds = 0;
  while (s.is_ok() && Clock::now() < give_up) {
    s = comm->allreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
    ++rounds;
  }
  report("rounds", std::to_string(rounds));
  if (s.is_ok()) {
    report("error", "\"no failure within 60 s\"");
    return 1;
  }
  report_failure(s);
  destroy(comm);
  return recover(rk);
}

int scenario_kill_between_ops(Rank& rk) {
  const Args& a = rk.args();
  std::unique_ptr<loom::Communicator> comm;
  loom::Status s = rk.make_comm("world", a.rank, a.size, &comm);
  std::vector<float> send(1031, float(a.rank + 1)), recv(1031);
  if (s.is_ok()) s = comm->allreduce(send.data(), recv.data(), send.size(), LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
  if (!s.is_ok()) {
    report("error", "\"" + s.to_string() + "\"");
    return 1;
  }
  report("ready", "1");
  std::vector<uint8_t> go;
  s = rk.store().get("go", &go, std::chrono::seconds(60));  // the driver kills the victim, then says go
  if (!s.is_ok()) {
    report("error", "\"no go: " + s.to_string() + "\"");
    return 1;
  }
  report("posted_at_ns", std::to_string(monotonic_ns()));
  s = comm->allreduce(send.data(), recv.data(), send.size(), LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
  if (s.is_ok()) s = comm->barrier();  // a dead member cannot have joined both
  if (s.is_ok()) {
    report("error", "\"the operations after the kill succeeded\"");
    return 1;
  }
  report_failure(s);
  // Every later operation fails alike, at once.
  const auto t0 = Clock::now();
  loom::Status later = comm->barrier();
  report("later_code", loom_status_name(later.code()));
  report("later_ms", std::to_string(ms_since(t0)));
  destroy(comm);
  return recover(rk);
}

}  // namespace ucx_rank
