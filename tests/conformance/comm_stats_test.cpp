// SPDX-License-Identifier: Apache-2.0
// comm_stats_test.cpp: a plugin that counts its traffic (comm_stats, ABI
// 1.11) counts it consistently: a fresh communicator starts at zero, an
// allreduce moves at least what any allreduce must (2(n-1) times the
// vector over the group) and at most what the known algorithms do, what
// the members sent adds up to what they received, a point-to-point
// message counts its bytes at both ends, and a struct too small is refused.
//
// Case names: CommStats.<what>.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "world.hpp"

namespace conformance {
namespace {

#define NEEDS_STATS()                                                                              \
  do {                                                                                             \
    if (!World::collective().descriptor().comm_stats)                                              \
      GTEST_SKIP() << "the plugin does not count its traffic (no comm_stats, ABI 1.11)";           \
  } while (0)

loom_comm_stats_v1 stats_of(const loom::Communicator& comm) {
  loom_comm_stats_v1 s{};
  const loom::Status status = comm.stats(&s);
  EXPECT_TRUE(is_ok(status));
  return s;
}

// The counters of every rank, summed over the world (i64 allreduce).
struct Totals {
  int64_t bytes_sent = 0, bytes_received = 0, messages_sent = 0, messages_received = 0;
};
Totals totals_over_world(const loom_comm_stats_v1& mine) {
  Buffer in(LOOM_DTYPE_I64, 4), out(LOOM_DTYPE_I64, 4);
  const double v[4] = {double(mine.bytes_sent), double(mine.bytes_received), double(mine.messages_sent),
                       double(mine.messages_received)};
  for (size_t i = 0; i < 4; ++i) in.set(i, v[i]);
  EXPECT_TRUE(is_ok(World::comm().allreduce(in.data(), out.data(), 4, LOOM_DTYPE_I64, LOOM_REDUCE_SUM)));
  return {int64_t(out.get(0)), int64_t(out.get(1)), int64_t(out.get(2)), int64_t(out.get(3))};
}

TEST(CommStats, AllreduceMovesWhatAnyAllreduceMustAndSendsEqualReceives) {
  NEEDS_STATS();
  CONFORMANCE_NEEDS(LOOM_OP_ALLREDUCE);
  std::unique_ptr<loom::Communicator> comm;
  ASSERT_TRUE(is_ok(World::create_comm("conformance-stats", &comm)));
  const loom_comm_stats_v1 before = stats_of(*comm);
  EXPECT_EQ(before.bytes_sent, 0u);
  EXPECT_EQ(before.bytes_received, 0u);
  EXPECT_EQ(before.operations, 0u);

  const uint64_t count = 1 << 16;
  const int64_t bytes = int64_t(count) * 4;
  Buffer send(LOOM_DTYPE_F32, count), recv(LOOM_DTYPE_F32, count);
  send.fill(0, count, [](size_t) { return 1.0; });
  ASSERT_TRUE(is_ok(comm->allreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM)));
  const loom_comm_stats_v1 after = stats_of(*comm);
  EXPECT_EQ(after.operations, 1u);

  const Totals t = totals_over_world(after);
  const int64_t n = World::size();
  if (n == 1) {
    EXPECT_EQ(t.bytes_sent, 0) << "one member has nobody to send to";
    EXPECT_EQ(t.bytes_received, 0);
    return;
  }
  EXPECT_EQ(t.bytes_sent, t.bytes_received) << "what the members sent must be what they received";
  EXPECT_EQ(t.messages_sent, t.messages_received);
  // Every allreduce moves at least 2(n-1) vectors over the group (reduce-
  // scatter plus allgather); recursive doubling moves log2(n) per member.
  EXPECT_GE(t.bytes_sent, 2 * (n - 1) * bytes);
  const int64_t log2n = int64_t(std::ceil(std::log2(double(n))));
  EXPECT_LE(t.bytes_sent, n * bytes * std::max<int64_t>(2, log2n + 1) + n * 65536)
      << "more than any known allreduce algorithm sends";
}

TEST(CommStats, PointToPointCountsItsBytesAtBothEnds) {
  NEEDS_STATS();
  CONFORMANCE_NEEDS(LOOM_OP_SEND_RECV);
  if (World::size() < 2) GTEST_SKIP() << "needs two ranks";
  std::unique_ptr<loom::Communicator> comm;
  ASSERT_TRUE(is_ok(World::create_comm("conformance-stats-p2p", &comm)));
  const uint64_t count = 1000;
  Buffer buf(LOOM_DTYPE_F32, count);
  const int rank = World::rank();
  if (rank == 0) {
    ASSERT_TRUE(is_ok(comm->send(buf.data(), count, LOOM_DTYPE_F32, 1)));
  } else if (rank == 1) {
    ASSERT_TRUE(is_ok(comm->recv(buf.data(), count, LOOM_DTYPE_F32, 0)));
  }
  const loom_comm_stats_v1 s = stats_of(*comm);
  const uint64_t want = count * 4;
  if (rank == 0) {
    EXPECT_GE(s.bytes_sent, want);
    EXPECT_LE(s.bytes_sent, want + 4096) << "more than the message and a header";
    EXPECT_EQ(s.bytes_received, 0u);
  } else if (rank == 1) {
    EXPECT_GE(s.bytes_received, want);
    EXPECT_LE(s.bytes_received, want + 4096);
    EXPECT_EQ(s.bytes_sent, 0u);
  } else {
    EXPECT_EQ(s.bytes_sent + s.bytes_received, 0u) << "a rank that took no part";
  }
  EXPECT_TRUE(still_works(World::comm()));
}

TEST(CommStats, AStructTooSmallOrNullIsRefused) {
  NEEDS_STATS();
  const loom_collective_v1& vt = World::collective().vtable();
  loom_comm_stats_v1 s{};
  s.struct_size = 8;
  EXPECT_EQ(vt.comm_stats(World::comm().handle(), &s), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vt.comm_stats(World::comm().handle(), nullptr), LOOM_ERR_INVALID_ARGUMENT);
  s.struct_size = sizeof s;
  EXPECT_EQ(vt.comm_stats(World::comm().handle(), &s), LOOM_OK);
}

}  // namespace
}  // namespace conformance
