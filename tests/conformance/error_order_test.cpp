// SPDX-License-Identifier: Apache-2.0
// error_order_test.cpp: the rules of collective.h that decide which error a
// post gets and where its message is read.
//  - ErrorOrder: on an aborted communicator, a post with a bad argument is
//    INVALID_ARGUMENT and a good one ABORTED (INVALID_ARGUMENT, then
//    ABORTED, then UNSUPPORTED).
//  - CommLastError (ABI 1.7, when offered): a failed post leaves its message
//    in its own communicator, untouched by another thread's failure on
//    another communicator.
//  - DeclaredAbsent (ABI 1.7): each operation a plugin declares absent is
//    refused by the host as UNSUPPORTED, naming it, without calling the
//    plugin (whose entry may be NULL).
//
// Case names: ErrorOrder.InvalidBeforeAborted, CommLastError.KeptPerCommunicator,
// DeclaredAbsent.RefusedByTheHost.
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "world.hpp"

namespace conformance {
namespace {

constexpr loom_dtype kF32 = LOOM_DTYPE_F32;
constexpr loom_dtype kBadDtype = 99;

// One post of an operation, with a bad argument or with good ones.
struct Post {
  const char* what;
  uint64_t op;  // LOOM_OP_* bit; 0 for allreduce_scaled (its capability bit)
  std::function<loom::Status(loom::Communicator&, loom::Request*)> bad, good;
};

// Buffers are captured by reference (they outlive the posts); numbers by value.
std::vector<Post> posts(Buffer& a, Buffer& b, int32_t size, int32_t rank) {
  const int32_t peer = (rank + 1) % size;
  const double nan = std::nan("");
  return {
      {"allreduce", LOOM_OP_ALLREDUCE,
       [&](loom::Communicator& c, loom::Request* r) { return c.iallreduce(a.data(), b.data(), 4, kBadDtype, LOOM_REDUCE_SUM, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.iallreduce(a.data(), b.data(), 4, kF32, LOOM_REDUCE_SUM, r); }},
      {"broadcast", LOOM_OP_BROADCAST,
       [&](loom::Communicator& c, loom::Request* r) { return c.ibroadcast(a.data(), b.data(), 4, kF32, -1, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.ibroadcast(a.data(), b.data(), 4, kF32, 0, r); }},
      {"reduce", LOOM_OP_REDUCE,
       [&, size](loom::Communicator& c, loom::Request* r) { return c.ireduce(a.data(), b.data(), 4, kF32, LOOM_REDUCE_SUM, size, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.ireduce(a.data(), b.data(), 4, kF32, LOOM_REDUCE_SUM, 0, r); }},
      {"allgather", LOOM_OP_ALLGATHER,
       [&](loom::Communicator& c, loom::Request* r) { return c.iallgather(a.data(), b.data(), 1, kBadDtype, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.iallgather(a.data(), b.data(), 1, kF32, r); }},
      {"reduce_scatter", LOOM_OP_REDUCE_SCATTER,
       [&](loom::Communicator& c, loom::Request* r) { return c.ireduce_scatter(a.data(), b.data(), 1, kF32, 0, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.ireduce_scatter(a.data(), b.data(), 1, kF32, LOOM_REDUCE_SUM, r); }},
      {"alltoall", LOOM_OP_ALLTOALL,
       [&](loom::Communicator& c, loom::Request* r) { return c.ialltoall(nullptr, b.data(), 1, kF32, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.ialltoall(a.data(), b.data(), 1, kF32, r); }},
      {"send", LOOM_OP_SEND_RECV,
       [&, size](loom::Communicator& c, loom::Request* r) { return c.isend(a.data(), 4, kF32, size + 3, r); },
       [&, peer](loom::Communicator& c, loom::Request* r) { return c.isend(a.data(), 4, kF32, peer, r); }},
      {"recv", LOOM_OP_SEND_RECV,
       [&](loom::Communicator& c, loom::Request* r) { return c.irecv(b.data(), 4, kF32, -1, r); },
       [&, peer](loom::Communicator& c, loom::Request* r) { return c.irecv(b.data(), 4, kF32, peer, r); }},
      {"allreduce_scaled", 0,
       [&, nan](loom::Communicator& c, loom::Request* r) { return c.iallreduce_scaled(a.data(), b.data(), 4, kF32, nan, r); },
       [&](loom::Communicator& c, loom::Request* r) { return c.iallreduce_scaled(a.data(), b.data(), 4, kF32, 0.5, r); }},
  };
}

bool available(const Post& p, loom::Communicator& comm) {
  return p.op == 0 ? comm.offers_scaled_allreduce() : offered(p.op);
}

TEST(ErrorOrder, InvalidBeforeAborted) {
  std::unique_ptr<loom::Communicator> side;
  ASSERT_TRUE(is_ok(World::create_comm("conformance-error-order", &side)));
  // Local: every rank aborts its own copy, so nobody waits on anybody.
  ASSERT_TRUE(is_ok(side->abort()));
  const size_t n = 4 * static_cast<size_t>(World::size());
  Buffer a(kF32, n), b(kF32, n);
  for (const Post& p : posts(a, b, side->size(), side->rank())) {
    if (!available(p, *side)) continue;
    SCOPED_TRACE(p.what);
    loom::Request request;
    EXPECT_TRUE(has_code(p.bad(*side, &request), LOOM_ERR_INVALID_ARGUMENT))
        << "a bad argument on an aborted communicator must win over ABORTED";
    EXPECT_FALSE(request.valid());
    EXPECT_TRUE(has_code(p.good(*side, &request), LOOM_ERR_ABORTED)) << "a good post on an aborted communicator";
    EXPECT_FALSE(request.valid());
  }
  side.reset();
  EXPECT_TRUE(still_works(World::comm()));
}

TEST(CommLastError, KeptPerCommunicator) {
  const loom::Collective& collective = World::collective();
  if (!collective.descriptor().comm_last_error) GTEST_SKIP() << "the plugin offers no comm_last_error (ABI 1.7)";
  CONFORMANCE_NEEDS(LOOM_OP_ALLREDUCE | LOOM_OP_BROADCAST);
  std::unique_ptr<loom::Communicator> first, second;
  ASSERT_TRUE(is_ok(World::create_comm("conformance-comm-error-1", &first)));
  ASSERT_TRUE(is_ok(World::create_comm("conformance-comm-error-2", &second)));
  const loom_collective_v1& vt = collective.vtable();
  Buffer a(kF32, 4), b(kF32, 4);
  // Through the raw vtable: what a C host sees.
  loom_request* raw = nullptr;
  EXPECT_EQ(vt.allreduce(first->handle(), a.data(), b.data(), 4, kBadDtype, LOOM_REDUCE_SUM, &raw),
            LOOM_ERR_INVALID_ARGUMENT);
  const std::string mine = vt.comm_last_error(first->handle());
  EXPECT_NE(mine.find("dtype"), std::string::npos) << "the message should name the bad dtype: " << mine;
  // Another thread fails on the other communicator meanwhile.
  std::thread other([&] {
    loom_request* r = nullptr;
    EXPECT_EQ(vt.broadcast(second->handle(), a.data(), b.data(), 4, kF32, -7, &r), LOOM_ERR_INVALID_ARGUMENT);
  });
  other.join();
  EXPECT_EQ(std::string(vt.comm_last_error(first->handle())), mine) << "another communicator's failure replaced it";
  const std::string theirs = vt.comm_last_error(second->handle());
  EXPECT_NE(theirs.find("-7"), std::string::npos) << "the other communicator's message should name root -7: " << theirs;
  second.reset();
  first.reset();
  EXPECT_TRUE(still_works(World::comm()));
}

TEST(DeclaredAbsent, RefusedByTheHost) {
  const uint64_t absent = World::collective().descriptor().absent_ops;
  if (absent == 0) GTEST_SKIP() << "the plugin offers every operation";
  loom::Communicator& comm = World::comm();
  const size_t n = 4 * static_cast<size_t>(World::size());
  Buffer a(kF32, n), b(kF32, n);
  for (const Post& p : posts(a, b, comm.size(), comm.rank())) {
    if (p.op == 0 || !(absent & p.op)) continue;
    SCOPED_TRACE(p.what);
    loom::Request request;
    const loom::Status s = p.good(comm, &request);  // the entry may be NULL: the host must not call it
    EXPECT_TRUE(has_code(s, LOOM_ERR_UNSUPPORTED));
    EXPECT_NE(s.message().find(p.what), std::string::npos) << s.message();
    EXPECT_FALSE(request.valid());
  }
  EXPECT_TRUE(still_works(comm));
}

}  // namespace
}  // namespace conformance
