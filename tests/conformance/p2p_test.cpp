// SPDX-License-Identifier: Apache-2.0
// p2p_test.cpp: send/recv in a ring over every dtype, the ordering of two
// messages between the same pair, and barrier.
//
// Case names: SendRecvRing.Exact/i8_nonblocking,
// SendRecvOrder.PostingOrder/sends_posted_first, Barrier.WaitsForLastRank/blocking.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

int next_rank() { return (World::rank() + 1) % World::size(); }
int prev_rank() { return (World::rank() + World::size() - 1) % World::size(); }

struct RingParam {
  loom_dtype dtype;
  Mode mode;
  std::string name() const { return dtype_label(dtype) + "_" + mode_label(mode); }
};
void PrintTo(const RingParam& p, std::ostream* os) { *os << p.name(); }

std::vector<RingParam> all_ring_params() {
  std::vector<RingParam> params;
  for (loom_dtype dtype : all_dtypes())
    for (Mode mode : all_modes()) params.push_back({dtype, mode});
  return params;
}

class SendRecvRing : public testing::TestWithParam<RingParam> {};

TEST_P(SendRecvRing, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_SEND_RECV);
  const RingParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  if (p.mode != Mode::kNonBlocking && comm.size() == 1) GTEST_SKIP() << "a blocking send to oneself cannot be matched";
  for (size_t count : odd_counts()) {
    SCOPED_TRACE("count " + std::to_string(count));
    const uint64_t seed = case_seed("ring/" + p.name() + "/" + std::to_string(count));
    Buffer send(p.dtype, count), recv(p.dtype, count);
    send.fill(0, count, [&](size_t i) { return movement_value(p.dtype, seed, comm.rank(), i); });
    EXPECT_TRUE(is_ok(ring_exchange(comm, p.mode, send.data(), recv.data(), count, p.dtype, World::timeout_ms())));
    EXPECT_TRUE(holds(recv, 0, count, [&](size_t i) { return movement_value(p.dtype, seed, prev_rank(), i); }));
    EXPECT_TRUE(guard_intact(recv));
  }
}

INSTANTIATE_TEST_SUITE_P(, SendRecvRing, testing::ValuesIn(all_ring_params()),
                         [](const testing::TestParamInfo<RingParam>& info) { return info.param.name(); });

// Two messages from each rank to the next must arrive in posting order.
enum class Order { kRecvsPostedFirst, kSendsPostedFirst, kLargeThenSmall };

std::string order_label(Order order) {
  switch (order) {
    case Order::kRecvsPostedFirst: return "recvs_posted_first";
    case Order::kSendsPostedFirst: return "sends_posted_first";
    default: return "large_then_small";
  }
}
void PrintTo(Order order, std::ostream* os) { *os << order_label(order); }

class SendRecvOrder : public testing::TestWithParam<Order> {};

TEST_P(SendRecvOrder, PostingOrder) {
  CONFORMANCE_NEEDS(LOOM_OP_SEND_RECV);
  const Order order = GetParam();
  loom::Communicator& comm = World::comm();
  // Different sizes where asked, so that a large (rendezvous) message cannot
  // be overtaken by a small (eager) one.
  const size_t count_a = order == Order::kLargeThenSmall ? (size_t{1} << 20) : 257;
  const size_t count_b = order == Order::kLargeThenSmall ? 3 : 257;
  const uint64_t seed_a = case_seed("order/a"), seed_b = case_seed("order/b");
  Buffer send_a(LOOM_DTYPE_I32, count_a), send_b(LOOM_DTYPE_I32, count_b);
  Buffer recv_a(LOOM_DTYPE_I32, count_a), recv_b(LOOM_DTYPE_I32, count_b);
  send_a.fill(0, count_a, [&](size_t i) { return movement_value(LOOM_DTYPE_I32, seed_a, comm.rank(), i); });
  send_b.fill(0, count_b, [&](size_t i) { return movement_value(LOOM_DTYPE_I32, seed_b, comm.rank(), i); });
  loom::Request ra, rb, sa, sb;
  auto post_recvs = [&] {
    EXPECT_TRUE(is_ok(comm.irecv(recv_a.data(), count_a, LOOM_DTYPE_I32, prev_rank(), &ra)));
    EXPECT_TRUE(is_ok(comm.irecv(recv_b.data(), count_b, LOOM_DTYPE_I32, prev_rank(), &rb)));
  };
  auto post_sends = [&] {
    EXPECT_TRUE(is_ok(comm.isend(send_a.data(), count_a, LOOM_DTYPE_I32, next_rank(), &sa)));
    EXPECT_TRUE(is_ok(comm.isend(send_b.data(), count_b, LOOM_DTYPE_I32, next_rank(), &sb)));
  };
  if (order == Order::kSendsPostedFirst) {
    post_sends();
    // Every rank's sends are posted before any receive exists.
    EXPECT_TRUE(is_ok(comm.barrier()));
    post_recvs();
  } else {
    post_recvs();
    EXPECT_TRUE(is_ok(comm.barrier()));
    post_sends();
  }
  std::vector<loom::Request*> all;
  for (loom::Request* r : {&ra, &rb, &sa, &sb})
    if (r->valid()) all.push_back(r);
  EXPECT_TRUE(is_ok(complete_all(all, World::timeout_ms())));
  EXPECT_TRUE(holds(recv_a, 0, count_a,
                    [&](size_t i) { return movement_value(LOOM_DTYPE_I32, seed_a, prev_rank(), i); }))
      << "the first receive did not get the first message";
  EXPECT_TRUE(holds(recv_b, 0, count_b,
                    [&](size_t i) { return movement_value(LOOM_DTYPE_I32, seed_b, prev_rank(), i); }))
      << "the second receive did not get the second message";
}

INSTANTIATE_TEST_SUITE_P(, SendRecvOrder,
                         testing::Values(Order::kRecvsPostedFirst, Order::kSendsPostedFirst, Order::kLargeThenSmall),
                         [](const testing::TestParamInfo<Order>& info) { return order_label(info.param); });

class Barrier : public testing::TestWithParam<Mode> {};

// The last rank enters 200 ms late; nobody may leave before it entered.
TEST_P(Barrier, WaitsForLastRank) {
  CONFORMANCE_NEEDS(LOOM_OP_BARRIER);
  const Mode mode = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(mode);
  loom::Communicator& comm = World::comm();
  auto barrier = [&] {
    return run(mode, [&] { return comm.barrier(); }, [&](loom::Request* r) { return comm.ibarrier(r); });
  };
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(is_ok(barrier()));  // also lines everyone up
  const bool late = comm.rank() == comm.size() - 1;
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(is_ok(barrier()));
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  if (!late) {
    EXPECT_GE(waited, 100) << "left the barrier before the last rank entered it";
  }
}

INSTANTIATE_TEST_SUITE_P(, Barrier, testing::ValuesIn(all_modes()),
                         [](const testing::TestParamInfo<Mode>& info) { return std::string(mode_label(info.param)); });

}  // namespace
}  // namespace conformance
