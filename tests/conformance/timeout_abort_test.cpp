// SPDX-License-Identifier: Apache-2.0
// timeout_abort_test.cpp: a wait that times out leaves the operation pending
// and waitable; comm_abort from another thread unblocks a waiter promptly.
//
// Case names: Timeout.WaitTimesOutThenCompletes/allreduce,
// Abort.FromAnotherThreadUnblocksWait/recv.
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

// What rank 0 waits on: a collective, or a message from rank 1.
enum class Pending { kAllreduce, kRecv };

std::string pending_label(Pending p) { return p == Pending::kAllreduce ? "allreduce" : "recv"; }
void PrintTo(Pending p, std::ostream* os) { *os << pending_label(p); }
std::string param_name(const testing::TestParamInfo<Pending>& info) { return pending_label(info.param); }

class Timeout : public testing::TestWithParam<Pending> {};

// Rank 0 posts and waits 200 ms while its peers post only after 600 ms: the
// wait gives TIMEOUT, bounded; waiting again completes it, correctly.
TEST_P(Timeout, WaitTimesOutThenCompletes) {
  const Pending pending = GetParam();
  CONFORMANCE_NEEDS(pending == Pending::kRecv ? LOOM_OP_SEND_RECV : LOOM_OP_ALLREDUCE);
  loom::Communicator& comm = World::comm();
  if (comm.size() == 1) GTEST_SKIP() << "needs a peer that posts late";
  const size_t count = 1031;
  const ReduceInputs in{LOOM_DTYPE_F32, LOOM_REDUCE_SUM, case_seed("timeout/" + pending_label(pending)), comm.size()};
  Buffer send(LOOM_DTYPE_F32, count), recv(LOOM_DTYPE_F32, count);
  send.fill(0, count, [&](size_t i) { return in.input(comm.rank(), i); });
  auto post = [&](loom::Request* r) {
    if (pending == Pending::kRecv) return comm.irecv(recv.data(), count, LOOM_DTYPE_F32, 1, r);
    return comm.iallreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, r);
  };
  if (comm.rank() == 0) {
    loom::Request req;
    const loom::Status posted = post(&req);
    EXPECT_TRUE(is_ok(posted));
    if (posted.is_ok()) {  // no early return: every rank reaches the barrier below
      bool done = true;
      auto start = Clock::now();
      EXPECT_TRUE(is_ok(req.test(&done)));
      EXPECT_LT(ms_since(start), 100) << "test() blocked";
      EXPECT_FALSE(done) << "finished before the peers posted";
      start = Clock::now();
      EXPECT_TRUE(has_code(req.wait(200), LOOM_ERR_TIMEOUT));
      const int64_t waited = ms_since(start);
      EXPECT_GE(waited, 150) << "wait(200) gave up early";
      EXPECT_LT(waited, 5000) << "wait(200) overran its timeout";
      // Still pending, and waitable again.
      const loom::Status again = req.wait(World::timeout_ms());
      EXPECT_TRUE(is_ok(again));
      if (again.code() == LOOM_ERR_TIMEOUT) abandon(std::move(req));
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    if (pending == Pending::kAllreduce) {
      EXPECT_TRUE(is_ok(comm.allreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM)));
    } else if (comm.rank() == 1) {
      EXPECT_TRUE(is_ok(comm.send(send.data(), count, LOOM_DTYPE_F32, 0)));
    }
  }
  if (pending == Pending::kAllreduce) {
    EXPECT_TRUE(holds(recv, 0, count, [&](size_t i) { return in.reference(i); }));
  } else if (comm.rank() == 0) {
    EXPECT_TRUE(holds(recv, 0, count, [&](size_t i) { return in.input(1, i); }));
  }
  EXPECT_TRUE(is_ok(comm.barrier()));
}

INSTANTIATE_TEST_SUITE_P(, Timeout, testing::Values(Pending::kAllreduce, Pending::kRecv), param_name);

// Every later operation on an aborted communicator fails with ABORTED.
void expect_aborted(const char* what, loom::Status posted, loom::Request& request) {
  EXPECT_TRUE(has_code(posted, LOOM_ERR_ABORTED)) << what << " on an aborted communicator";
  if (posted.is_ok() && request.valid()) {
    EXPECT_TRUE(has_code(request.wait(2000), LOOM_ERR_ABORTED)) << what << ": posted, then waited";
    request.reset();  // allowed for any request of an aborted communicator
  }
}

// Rank 0's part: another thread aborts `side` while this one waits on req.
void abort_while_waiting(loom::Communicator& side, loom::Request& req, Buffer& buf, Buffer& out) {
  loom::Status abort_status;
  const auto start = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abort_status = side.abort();
  });
  const loom::Status waited = req.wait(10000);
  const int64_t elapsed = ms_since(start);
  aborter.join();
  EXPECT_TRUE(is_ok(abort_status));
  EXPECT_TRUE(has_code(waited, LOOM_ERR_ABORTED));
  EXPECT_LT(elapsed, 2000) << "the waiter was not unblocked promptly";
  EXPECT_GE(elapsed, 90) << "the wait ended before abort was called";
  EXPECT_TRUE(is_ok(side.abort())) << "abort is idempotent";
  // A poller must see the end too, or it would spin forever.
  bool done = false;
  EXPECT_TRUE(has_code(req.test(&done), LOOM_ERR_ABORTED)) << "test() after the abort";
  EXPECT_TRUE(done) << "test() after the abort still says running";
  loom::Request later;
  expect_aborted("irecv", side.irecv(buf.data(), 7, LOOM_DTYPE_F32, 1, &later), later);
  expect_aborted("isend", side.isend(buf.data(), 7, LOOM_DTYPE_F32, 1, &later), later);
  expect_aborted("iallreduce", side.iallreduce(buf.data(), out.data(), 7, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &later),
                 later);
  EXPECT_TRUE(has_code(side.barrier(), LOOM_ERR_ABORTED)) << "barrier on an aborted communicator";
  req.reset();  // freeing a request of an aborted communicator is allowed
}

class Abort : public testing::TestWithParam<Pending> {};

// On a communicator of its own, rank 0 waits for something its peers never
// post (a message from rank 1, or their part of an allreduce); another
// thread aborts after 100 ms; the wait returns ABORTED promptly.
TEST_P(Abort, FromAnotherThreadUnblocksWait) {
  const Pending pending = GetParam();
  CONFORMANCE_NEEDS(LOOM_OP_SEND_RECV | LOOM_OP_ALLREDUCE | LOOM_OP_BARRIER);
  if (!World::collective().has_capability(LOOM_CAP_ABORT)) GTEST_SKIP() << "plugin lacks LOOM_CAP_ABORT";
  if (World::size() == 1) GTEST_SKIP() << "needs a peer that never posts";
  std::unique_ptr<loom::Communicator> side;
  // Collective over all ranks (for MPI, a second MPI_Comm_dup).
  ASSERT_TRUE(is_ok(World::create_comm("conformance-abort-" + pending_label(pending), &side)));
  if (side->rank() == 0) {
    Buffer buf(LOOM_DTYPE_F32, 7), out(LOOM_DTYPE_F32, 7);
    loom::Request req;
    const loom::Status posted =
        pending == Pending::kRecv
            ? side->irecv(buf.data(), 7, LOOM_DTYPE_F32, 1, &req)
            : side->iallreduce(buf.data(), out.data(), 7, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &req);
    EXPECT_TRUE(is_ok(posted));
    if (posted.is_ok()) abort_while_waiting(*side, req, buf, out);  // no early return: all reach the barrier
  }
  // Everyone destroys the side communicator once rank 0 is done with it.
  EXPECT_TRUE(is_ok(World::comm().barrier()));
  side.reset();
  // The world communicator is unaffected.
  EXPECT_TRUE(still_works(World::comm()));
}

INSTANTIATE_TEST_SUITE_P(, Abort, testing::Values(Pending::kRecv, Pending::kAllreduce), param_name);

}  // namespace
}  // namespace conformance
