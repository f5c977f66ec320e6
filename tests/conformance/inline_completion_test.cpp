// SPDX-License-Identifier: Apache-2.0
// inline_completion_test.cpp: operations called with request == NULL
// (LOOM_CAP_INLINE_COMPLETION, ABI 1.1) straight through the vtable, and
// what a blocking call does when it times out, inline or not.
//
// The data cases in Mode::kBlocking already run every operation inline
// through the Communicator; these cases pin down what only the raw call
// shows (no request is handed out, errors come back from the call itself)
// and the failure paths: timeout and abort from another thread.
//
// Case names: Inline.RawVtable, BlockingTimeout.AbortsCommunicator/recv,
// Inline.AbortFromAnotherThread.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

using Clock = std::chrono::steady_clock;

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

bool declares_inline() { return World::collective().has_capability(LOOM_CAP_INLINE_COMPLETION); }

// Status of a raw vtable call, with the plugin's message on failure.
loom::Status raw_status(loom_status code) {
  return code == LOOM_OK ? loom::Status::ok() : World::collective().error(code, "inline call");
}

// A 1.1 host hands a plugin that declares the bit to the inline path.
TEST(Inline, DeclaredBitIsUsed) {
  if (!declares_inline()) GTEST_SKIP() << "plugin lacks LOOM_CAP_INLINE_COMPLETION";
  EXPECT_GE(World::collective().descriptor().abi_version, LOOM_ABI_MAKE(1, 1))
      << "the plugin declares an ABI 1.1 capability but negotiated an older ABI";
  EXPECT_TRUE(World::comm().completes_inline());
}

// Straight through the vtable with request == NULL: results are there when
// the call returns (out of place, in place with AVG's division, and
// reduce_scatter's in-place move), and a refused call says why.
TEST(Inline, RawVtable) {
  if (!declares_inline()) GTEST_SKIP() << "plugin lacks LOOM_CAP_INLINE_COMPLETION";
  const loom_collective_v1& vt = World::collective().vtable();
  loom_comm* comm = World::comm().handle();
  const int rank = World::rank(), size = World::size();
  const size_t count = 33;
  for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_AVG}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(reduce_op_label(op) + (in_place ? " in place" : " out of place"));
      const ReduceInputs in{LOOM_DTYPE_F32, op, case_seed("inline/raw/" + reduce_op_label(op)), size};
      Buffer send(LOOM_DTYPE_F32, count), recv(LOOM_DTYPE_F32, count);
      send.fill(0, count, [&](size_t i) { return in.input(rank, i); });
      Buffer& out = in_place ? send : recv;
      EXPECT_TRUE(is_ok(raw_status(vt.allreduce(comm, send.data(), out.data(), count, LOOM_DTYPE_F32, op, nullptr))));
      EXPECT_TRUE(holds(out, 0, count, [&](size_t i) { return in.reference(i); }));
      EXPECT_TRUE(guard_intact(out));
    }
  }
  {
    SCOPED_TRACE("reduce_scatter in place");
    const ReduceInputs in{LOOM_DTYPE_I32, LOOM_REDUCE_SUM, case_seed("inline/raw/reduce_scatter"), size};
    const size_t block = 5;
    Buffer buf(LOOM_DTYPE_I32, block * static_cast<size_t>(size));
    buf.fill(0, block * static_cast<size_t>(size), [&](size_t i) { return in.input(rank, i); });
    const size_t mine = block * static_cast<size_t>(rank);
    EXPECT_TRUE(is_ok(raw_status(
        vt.reduce_scatter(comm, buf.data(), buf.data(mine), block, LOOM_DTYPE_I32, LOOM_REDUCE_SUM, nullptr))));
    EXPECT_TRUE(holds(buf, mine, block, [&](size_t i) { return in.reference(mine + i); }));
  }
  EXPECT_TRUE(is_ok(raw_status(vt.barrier(comm, nullptr))));
  {
    SCOPED_TRACE("refused inline");
    Buffer a(LOOM_DTYPE_F32, 4), b(LOOM_DTYPE_F32, 4);
    const loom::Status bad_dtype = raw_status(vt.allreduce(comm, a.data(), b.data(), 4, 99, LOOM_REDUCE_SUM, nullptr));
    EXPECT_TRUE(has_code(bad_dtype, LOOM_ERR_INVALID_ARGUMENT));
    EXPECT_FALSE(bad_dtype.message().empty());
    const loom::Status bad_root = raw_status(vt.broadcast(comm, a.data(), b.data(), 4, LOOM_DTYPE_F32, size, nullptr));
    EXPECT_TRUE(has_code(bad_root, LOOM_ERR_INVALID_ARGUMENT));
    const loom::Status overlap =
        raw_status(vt.allreduce(comm, a.data(), a.data(1), 3, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, nullptr));
    EXPECT_TRUE(has_code(overlap, LOOM_ERR_INVALID_ARGUMENT));
  }
  // Nothing of the refused calls was posted: the ranks are still in step.
  int32_t one = 1, total = 0;
  EXPECT_TRUE(is_ok(raw_status(vt.allreduce(comm, &one, &total, 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM, nullptr))));
  EXPECT_EQ(total, size);
}

// What rank 0 blocks on: a collective, or a message from rank 1.
enum class Pending { kAllreduce, kRecv };
std::string pending_label(Pending p) { return p == Pending::kAllreduce ? "allreduce" : "recv"; }
void PrintTo(Pending p, std::ostream* os) { *os << pending_label(p); }

class BlockingTimeout : public testing::TestWithParam<Pending> {};

// On a communicator with a 1 s timeout, rank 0 makes a blocking call its
// peers never match. Inline or post + wait, the call gives TIMEOUT within a
// bounded time and leaves the communicator aborted (collective.hpp): its
// operation can no longer finish in step with the peers.
TEST_P(BlockingTimeout, AbortsCommunicator) {
  const Pending pending = GetParam();
  if (World::size() == 1) GTEST_SKIP() << "needs a peer that never posts";
  // Also bounds comm_create, so long enough for ranks that arrive late on a
  // loaded machine; the barrier lines them up first.
  constexpr int64_t kTimeoutMs = 1000;
  ASSERT_TRUE(is_ok(World::comm().barrier()));
  std::unique_ptr<loom::Communicator> side;
  ASSERT_TRUE(is_ok(World::create_comm("conformance-timeout-" + pending_label(pending), &side, kTimeoutMs)));
  if (side->rank() == 0) {
    // Buffers outlive the communicator: a timed-out operation may hold them
    // until comm_destroy.
    Buffer send(LOOM_DTYPE_F32, 9), recv(LOOM_DTYPE_F32, 9);
    const auto start = Clock::now();
    const loom::Status s =
        pending == Pending::kRecv
            ? side->recv(recv.data(), 9, LOOM_DTYPE_F32, 1)
            : side->allreduce(send.data(), recv.data(), 9, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
    const int64_t waited = ms_since(start);
    EXPECT_TRUE(has_code(s, LOOM_ERR_TIMEOUT));
    EXPECT_FALSE(s.message().empty());
    EXPECT_GE(waited, kTimeoutMs - 100) << "gave up before the communicator's timeout";
    EXPECT_LT(waited, kTimeoutMs + 5000) << "overran the communicator's timeout";
    EXPECT_TRUE(has_code(side->barrier(), LOOM_ERR_ABORTED)) << "the communicator was not aborted";
    loom::Request later;
    EXPECT_TRUE(has_code(side->iallreduce(send.data(), recv.data(), 9, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &later),
                         LOOM_ERR_ABORTED));
    EXPECT_FALSE(later.valid());
    side.reset();  // before its buffers go
  }
  EXPECT_TRUE(is_ok(World::comm().barrier()));
  side.reset();
  EXPECT_TRUE(still_works(World::comm()));  // the world communicator is unaffected
}

INSTANTIATE_TEST_SUITE_P(, BlockingTimeout, testing::Values(Pending::kAllreduce, Pending::kRecv),
                         [](const testing::TestParamInfo<Pending>& info) { return pending_label(info.param); });

// comm_abort from another thread ends an inline operation promptly.
TEST(Inline, AbortFromAnotherThread) {
  if (!declares_inline()) GTEST_SKIP() << "plugin lacks LOOM_CAP_INLINE_COMPLETION";
  if (!World::collective().has_capability(LOOM_CAP_ABORT)) GTEST_SKIP() << "plugin lacks LOOM_CAP_ABORT";
  if (World::size() == 1) GTEST_SKIP() << "needs a peer that never posts";
  std::unique_ptr<loom::Communicator> side;
  ASSERT_TRUE(is_ok(World::create_comm("conformance-inline-abort", &side)));
  if (side->rank() == 0) {
    Buffer send(LOOM_DTYPE_F32, 7), recv(LOOM_DTYPE_F32, 7);
    loom::Status abort_status;
    const auto start = Clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      abort_status = side->abort();
    });
    const loom::Status s = raw_status(World::collective().vtable().allreduce(
        side->handle(), send.data(), recv.data(), 7, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, nullptr));
    const int64_t elapsed = ms_since(start);
    aborter.join();
    EXPECT_TRUE(is_ok(abort_status));
    EXPECT_TRUE(has_code(s, LOOM_ERR_ABORTED));
    EXPECT_GE(elapsed, 90) << "the call ended before abort was called";
    EXPECT_LT(elapsed, 2000) << "the inline call was not unblocked promptly";
    side.reset();  // before its buffers go
  }
  EXPECT_TRUE(is_ok(World::comm().barrier()));
}

}  // namespace
}  // namespace conformance
