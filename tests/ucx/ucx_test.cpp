// SPDX-License-Identifier: Apache-2.0
// ucx_test: the ucx plugin under real processes (ucx_rank helpers): SIGKILL
// of a rank mid-operation and between operations, leaks over 1000
// communicators, mismatched arguments across ranks, and every algorithm
// forced by options. Every wait is bounded; every process started is killed
// and reaped on every path (Job's destructor, and PR_SET_PDEATHSIG).
//
// Case names: KillRank.DuringLargeAllreduce/ranks3,
// KillRank.BetweenOps/ranks4, KillRank.UnreapedBetweenOps/ranks2, Leak.CreateUseDestroy1000Times,
// Mismatch.InvalidArgumentOnEveryRank/ranks3, Algorithms.Exact/ranks4,
// BackToBack.EveryResultExact/ranks3.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "job.hpp"
#include "liveness.h"  // the plugin's /proc reading, unit-tested in liveness_test.cpp

namespace ucx_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kTimeoutMs = 3000;  // the communicators' timeout in the fault cases

std::string dump(const Job& job) {
  std::string text;
  for (int r = 0; r < job.size(); ++r) text += "---- rank " + std::to_string(r) + " ----\n" + job.output(r);
  return text;
}

std::string param_name(const testing::TestParamInfo<int>& info) { return "ranks" + std::to_string(info.param); }

// What every survivor of a kill must show: a PEER_FAILED or TIMEOUT within
// twice the timeout of the kill, a destroy that did not wait for the dead,
// and a working communicator among the survivors.
void check_survivors(Job& job, int victim, int64_t killed_at_ns) {
  for (int r = 0; r < job.size(); ++r) {
    if (r == victim) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    const int code = job.wait_exit(r, milliseconds(2 * kTimeoutMs + 30000));
    EXPECT_EQ(code, 0) << dump(job);
    const std::string failed = job.result(r, "failed_code");
    EXPECT_TRUE(failed == "LOOM_ERR_PEER_FAILED" || failed == "LOOM_ERR_TIMEOUT") << failed;
    const int64_t at = std::atoll(job.result(r, "failed_at_ns").c_str());
    const double after_ms = double(at - killed_at_ns) / 1e6;
    EXPECT_LE(after_ms, 2.0 * kTimeoutMs) << "the failure surfaced too late";
    EXPECT_LT(std::atof(job.result(r, "destroy_ms").c_str()), 1000.0) << "destroying the failed communicator waited";
    EXPECT_EQ(job.result(r, "recovered"), "ok");
    std::printf("[ rank %d ] %s %.0f ms after the kill; destroy %s ms; new communicator in %s ms\n", r,
                failed.c_str(), after_ms, job.result(r, "destroy_ms").c_str(),
                job.result(r, "recover_create_ms").c_str());
  }
}

class KillRank : public testing::TestWithParam<int> {};

TEST_P(KillRank, DuringLargeAllreduce) {
  const int n = GetParam(), victim = 1;
  Job job(n, "kill_during_allreduce",
          {"--timeout-ms", std::to_string(kTimeoutMs), "--victim", std::to_string(victim)});
  for (int r = 0; r < n; ++r) ASSERT_TRUE(job.wait_for(r, "ready", seconds(60))) << dump(job);
  std::this_thread::sleep_for(milliseconds(300));  // deep inside the 16 MiB allreduces
  const int64_t killed_at = job.kill(victim);
  check_survivors(job, victim, killed_at);
}

TEST_P(KillRank, BetweenOps) {
  const int n = GetParam(), victim = n - 1;
  Job job(n, "kill_between_ops", {"--timeout-ms", std::to_string(kTimeoutMs), "--victim", std::to_string(victim)});
  for (int r = 0; r < n; ++r) ASSERT_TRUE(job.wait_for(r, "ready", seconds(60))) << dump(job);
  const int64_t killed_at = job.kill(victim);
  ASSERT_EQ(job.wait_exit(victim, seconds(5)), -1);
  ASSERT_TRUE(job.store().set("go", {1}).is_ok());
  check_survivors(job, victim, killed_at);
  for (int r = 0; r < n - 1; ++r) {
    const std::string later = job.result(r, "later_code");
    EXPECT_TRUE(later == "LOOM_ERR_PEER_FAILED" || later == "LOOM_ERR_ABORTED") << "rank " << r << ": " << later;
    EXPECT_LT(std::atof(job.result(r, "later_ms").c_str()), 100.0) << "rank " << r << ": later operations must fail at once";
  }
}

// The victim stays a zombie (killed, not reaped: a launcher waiting on
// another child first). UCX's keepalive counts such a process alive on
// shared memory (its /proc entry keeps its start time); the plugin reads
// its state and fails the communicator within a second or so, where
// before the survivors waited out their whole timeout.
TEST_P(KillRank, UnreapedBetweenOps) {
  const int n = GetParam(), victim = n - 1;
  constexpr int64_t kLongTimeoutMs = 20000;  // a TIMEOUT cannot pass the bound below
  Job job(n, "kill_between_ops", {"--timeout-ms", std::to_string(kLongTimeoutMs), "--victim", std::to_string(victim)});
  for (int r = 0; r < n; ++r) ASSERT_TRUE(job.wait_for(r, "ready", seconds(60))) << dump(job);
  job.hold(victim);
  const loom_ucx::ProcessWatch watch = loom_ucx::watch_process(job.pid(victim));
  ASSERT_NE(watch.pid, 0);
  const int64_t killed_at = job.kill(victim);
  // The test means nothing unless the victim really is a zombie.
  const auto until = Clock::now() + seconds(10);
  while (loom_ucx::process_state(watch) != loom_ucx::ProcessState::kExited && Clock::now() < until)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(loom_ucx::process_state(watch), loom_ucx::ProcessState::kExited) << "the killed rank did not stay a zombie";
  ASSERT_TRUE(job.store().set("go", {1}).is_ok());
  bool named = false;
  for (int r = 0; r < n - 1; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(job.wait_exit(r, seconds(60)), 0) << dump(job);
    EXPECT_EQ(job.result(r, "failed_code"), "LOOM_ERR_PEER_FAILED") << dump(job);
    const double after_ms = double(std::atoll(job.result(r, "failed_at_ns").c_str()) - killed_at) / 1e6;
    EXPECT_LE(after_ms, 5000.0) << "the survivor found the zombie too late";
    named = named || job.result(r, "failed_message").find("has exited") != std::string::npos;
    EXPECT_EQ(job.result(r, "recovered"), "ok");
    std::printf("[ rank %d ] %s %.0f ms after the kill: %s\n", r, job.result(r, "failed_code").c_str(), after_ms,
                job.result(r, "failed_message").c_str());
  }
  EXPECT_TRUE(named) << "no survivor said the victim's process had exited\n" << dump(job);
  EXPECT_EQ(job.wait_exit(victim, seconds(5)), -1);  // reaped now: killed by the signal
}

INSTANTIATE_TEST_SUITE_P(, KillRank, testing::Values(2, 3, 4), param_name);

// comm_abort from another thread while the ranks are deep in large
// allreduces (with whole ring blocks, long cross-memory-attach reads of the
// peer's memory): the aborting rank's allreduce ends ABORTED within moments,
// the others' with PEER_FAILED (the memory it offered is gone) or TIMEOUT.
class AbortRank : public testing::TestWithParam<int> {};

TEST_P(AbortRank, DuringLargeAllreduce) {
  const int n = GetParam();
  for (const char* whole : {"false", "true"}) {  // chunked messages, whole ring blocks
    SCOPED_TRACE(std::string("cma_whole_blocks = ") + whole);
    Job job(n, "abort_during_allreduce",
            {"--timeout-ms", std::to_string(kTimeoutMs), "--option", std::string("cma_whole_blocks=") + whole,
             "--option", "cma_only_oversubscribed=false"});
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(job.wait_exit(r, milliseconds(2 * kTimeoutMs + 60000)), 0) << dump(job);
      const std::string code = job.result(r, "ended_code");
      if (r == 0) {
        EXPECT_EQ(code, "LOOM_ERR_ABORTED") << dump(job);
        EXPECT_LT(std::atof(job.result(r, "abort_to_end_ms").c_str()), 200.0) << "the abort was seen late";
      } else {
        EXPECT_TRUE(code == "LOOM_ERR_PEER_FAILED" || code == "LOOM_ERR_TIMEOUT") << code << "\n" << dump(job);
      }
      EXPECT_EQ(job.result(r, "error"), "") << dump(job);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, AbortRank, testing::Values(2, 3), param_name);

// 1000 communicators of 2 ranks, each created, used (both allreduce
// algorithms and a barrier) and destroyed. Tolerance, from iteration 100 to
// 1000: no descriptor and no thread more, resident memory within 1 MiB (a
// leak of about 1 KiB per communicator would exceed it; measured here: under
// 40 KiB in all).
TEST(Leak, CreateUseDestroy1000Times) {
  Job job(2, "leak", {"--iterations", "1000", "--timeout-ms", "20000"});
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(job.wait_exit(r, seconds(110)), 0) << dump(job);
    const long rss_warm = std::atol(job.result(r, "rss_kib_warm").c_str());
    const long rss_end = std::atol(job.result(r, "rss_kib_end").c_str());
    EXPECT_EQ(job.result(r, "fds_warm"), job.result(r, "fds_end"));
    EXPECT_EQ(job.result(r, "threads_warm"), job.result(r, "threads_end"));
    EXPECT_LE(rss_end - rss_warm, 1024) << "resident memory grew from " << rss_warm << " to " << rss_end << " KiB";
    std::printf("[ rank %d ] rss %ld -> %ld KiB, fds %s -> %s, threads %s -> %s, %s ms per communicator\n", r, rss_warm,
                rss_end, job.result(r, "fds_warm").c_str(), job.result(r, "fds_end").c_str(),
                job.result(r, "threads_warm").c_str(), job.result(r, "threads_end").c_str(),
                job.result(r, "ms_per_iteration").c_str());
  }
}

// Counts, dtypes, reduce ops, roots, operations and algorithm choices that
// differ across ranks: INVALID_ARGUMENT within 2 s (the timeout is 10 s) on
// every rank whose result depends on the odd one out (the others may finish
// first with a right result, which the helper checks), and the
// communicator still works afterwards.
class Mismatch : public testing::TestWithParam<int> {};

TEST_P(Mismatch, InvalidArgumentOnEveryRank) {
  const int n = GetParam();
  Job job(n, "mismatch", {"--timeout-ms", "10000"});
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(job.wait_exit(r, seconds(90)), 0) << dump(job);
    EXPECT_EQ(job.result(r, "mismatches_missed"), "0");
    for (const char* c : {"count", "dtype_same_size", "reduce_op", "count_across_algorithms", "large_count",
                          "broadcast_root", "operation", "allgather_count", "scale", "scale_large",
                          "scaled_and_plain_sum"}) {
      const std::string code = job.result(r, std::string(c) + "_code");
      const bool may_finish = std::string(c) == "broadcast_root" && r != n - 1;
      EXPECT_TRUE(code == "LOOM_ERR_INVALID_ARGUMENT" || (may_finish && code == "LOOM_OK")) << c << ": " << code;
      EXPECT_LT(std::atof(job.result(r, std::string(c) + "_ms").c_str()), 2000.0) << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, Mismatch, testing::Values(2, 3), param_name);

// Every operation and dtype, exactly, under option sets forcing each algorithm.
class Algorithms : public testing::TestWithParam<int> {};

TEST_P(Algorithms, Exact) {
  const int n = GetParam();
  Job job(n, "algorithms", {"--timeout-ms", "20000"});
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(job.wait_exit(r, seconds(110)), 0) << dump(job);
    for (const char* set : {"defaults", "latency", "bandwidth", "cma_whole"})
      EXPECT_EQ(job.result(r, std::string("set_") + set), "ok") << set;
  }
}

INSTANTIATE_TEST_SUITE_P(, Algorithms, testing::Values(2, 3, 4), param_name);

// Non-blocking operations of every kind posted back to back (broadcasts from
// one root in a row among them) and waited for in a different order on each
// rank: every result exact, so no message went to another operation.
class BackToBack : public testing::TestWithParam<int> {};

TEST_P(BackToBack, EveryResultExact) {
  const int n = GetParam();
  Job job(n, "back_to_back", {"--timeout-ms", "20000"});
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(job.wait_exit(r, seconds(110)), 0) << dump(job);
    for (const char* set : {"defaults", "latency", "bandwidth", "cma_always", "cma_never", "cma_whole"})
      EXPECT_EQ(job.result(r, std::string("set_") + set), "ok") << set << "\n" << dump(job);
  }
}

INSTANTIATE_TEST_SUITE_P(, BackToBack, testing::Values(2, 3), param_name);

}  // namespace
}  // namespace ucx_test
