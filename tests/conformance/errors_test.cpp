// SPDX-License-Identifier: Apache-2.0
// errors_test.cpp: bad arguments return LOOM_ERR_INVALID_ARGUMENT, hand out
// no request, post nothing, and leave the communicator usable. Every rank
// makes the same bad calls, so a plugin that wrongly posts one cannot leave
// a half-matched operation behind on some ranks only.
//
// Case names: InvalidArgument.Refused/root_out_of_range, .../bad_overlap.
#include <string>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

constexpr uint64_t kCount = 4;
constexpr loom_dtype kF32 = LOOM_DTYPE_F32;

enum class Bad { kRoot, kPeer, kDtype, kReduceOp, kNullBuffer, kOverlap };

class InvalidArgument : public testing::TestWithParam<Bad> {
 protected:
  // The non-blocking post `what` must be refused as invalid, with a reason,
  // and hand out no request.
  void expect_refused(const char* what, loom::Status status, loom::Request& request) {
    EXPECT_TRUE(has_code(status, LOOM_ERR_INVALID_ARGUMENT)) << what;
    if (!status.is_ok()) {
      EXPECT_FALSE(status.message().empty()) << what << ": no reason given";
    }
    EXPECT_FALSE(request.valid()) << what << ": a request was handed out although the post failed";
    if (status.is_ok() && request.valid()) {
      // Wrongly posted (on every rank alike): finish it if it can finish.
      const loom::Status waited = request.wait(2000);
      if (waited.code() == LOOM_ERR_TIMEOUT) abandon(std::move(request));
      request.reset();
    }
  }
  // The blocking form `what` must fail the same way.
  void expect_refused(const char* what, loom::Status status) {
    EXPECT_TRUE(has_code(status, LOOM_ERR_INVALID_ARGUMENT)) << what << " (blocking)";
  }
  void root_out_of_range();
  void peer_out_of_range();
  void unknown_dtype();
  void unknown_reduce_op();
  void null_buffer_with_count();
  void bad_overlap();

  // After every case: the communicator is intact and in step on all ranks.
  void TearDown() override {
    loom::Communicator& comm = World::comm();
    Buffer send(LOOM_DTYPE_I32, 7), recv(LOOM_DTYPE_I32, 7);
    send.fill(0, 7, [&](size_t i) { return static_cast<double>(comm.rank() + 1) * static_cast<double>(i); });
    EXPECT_TRUE(is_ok(comm.allreduce(send.data(), recv.data(), 7, LOOM_DTYPE_I32, LOOM_REDUCE_SUM)))
        << "the communicator no longer works after the refused calls";
    const double ranks = static_cast<double>(comm.size()) * (comm.size() + 1) / 2;
    EXPECT_TRUE(holds(recv, 0, 7, [&](size_t i) { return ranks * static_cast<double>(i); }));
  }

  loom::Communicator& comm = World::comm();
  const int32_t size = World::size();
  Buffer a{kF32, kCount * static_cast<size_t>(World::size())};
  Buffer b{kF32, kCount * static_cast<size_t>(World::size())};
  loom::Request req;
};

void InvalidArgument::root_out_of_range() {
  for (int32_t root : {size, -1, size + 100}) {
    SCOPED_TRACE("root " + std::to_string(root));
    if (offered(LOOM_OP_BROADCAST)) expect_refused("broadcast", comm.ibroadcast(a.data(), b.data(), kCount, kF32, root, &req), req);
    if (offered(LOOM_OP_REDUCE)) expect_refused("reduce", comm.ireduce(a.data(), b.data(), kCount, kF32, LOOM_REDUCE_SUM, root, &req), req);
    if (offered(LOOM_OP_BROADCAST)) expect_refused("broadcast", comm.broadcast(a.data(), b.data(), kCount, kF32, root));
    if (offered(LOOM_OP_REDUCE)) expect_refused("reduce", comm.reduce(a.data(), b.data(), kCount, kF32, LOOM_REDUCE_SUM, root));
  }
}

void InvalidArgument::peer_out_of_range() {
  for (int32_t peer : {size, -1, size + 100}) {
    SCOPED_TRACE("peer " + std::to_string(peer));
    if (offered(LOOM_OP_SEND_RECV)) expect_refused("send", comm.isend(a.data(), kCount, kF32, peer, &req), req);
    if (offered(LOOM_OP_SEND_RECV)) expect_refused("recv", comm.irecv(b.data(), kCount, kF32, peer, &req), req);
    if (offered(LOOM_OP_SEND_RECV)) expect_refused("send", comm.send(a.data(), kCount, kF32, peer));
    if (offered(LOOM_OP_SEND_RECV)) expect_refused("recv", comm.recv(b.data(), kCount, kF32, peer));
  }
}

void InvalidArgument::unknown_dtype() {
  for (loom_dtype dtype : {loom_dtype{0}, loom_dtype{99}}) {
    SCOPED_TRACE("dtype " + std::to_string(dtype));
    if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce", comm.iallreduce(a.data(), b.data(), kCount, dtype, LOOM_REDUCE_SUM, &req), req);
    if (offered(LOOM_OP_BROADCAST)) expect_refused("broadcast", comm.ibroadcast(a.data(), b.data(), kCount, dtype, 0, &req), req);
    if (offered(LOOM_OP_REDUCE)) expect_refused("reduce", comm.ireduce(a.data(), b.data(), kCount, dtype, LOOM_REDUCE_SUM, 0, &req), req);
    if (offered(LOOM_OP_ALLGATHER)) expect_refused("allgather", comm.iallgather(a.data(), b.data(), 1, dtype, &req), req);
    if (offered(LOOM_OP_REDUCE_SCATTER)) expect_refused("reduce_scatter", comm.ireduce_scatter(a.data(), b.data(), 1, dtype, LOOM_REDUCE_SUM, &req), req);
    if (offered(LOOM_OP_ALLTOALL)) expect_refused("alltoall", comm.ialltoall(a.data(), b.data(), 1, dtype, &req), req);
    if (offered(LOOM_OP_SEND_RECV)) expect_refused("send", comm.isend(a.data(), kCount, dtype, 0, &req), req);
    if (offered(LOOM_OP_SEND_RECV)) expect_refused("recv", comm.irecv(b.data(), kCount, dtype, 0, &req), req);
    if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce", comm.allreduce(a.data(), b.data(), kCount, dtype, LOOM_REDUCE_SUM));
  }
}

void InvalidArgument::unknown_reduce_op() {
  for (loom_reduce_op op : {loom_reduce_op{0}, loom_reduce_op{99}}) {
    SCOPED_TRACE("op " + std::to_string(op));
    if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce", comm.iallreduce(a.data(), b.data(), kCount, kF32, op, &req), req);
    if (offered(LOOM_OP_REDUCE)) expect_refused("reduce", comm.ireduce(a.data(), b.data(), kCount, kF32, op, 0, &req), req);
    if (offered(LOOM_OP_REDUCE_SCATTER)) expect_refused("reduce_scatter", comm.ireduce_scatter(a.data(), b.data(), 1, kF32, op, &req), req);
    if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce", comm.allreduce(a.data(), b.data(), kCount, kF32, op));
  }
}

void InvalidArgument::null_buffer_with_count() {
  if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce send=NULL", comm.iallreduce(nullptr, b.data(), kCount, kF32, LOOM_REDUCE_SUM, &req), req);
  if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce recv=NULL", comm.iallreduce(a.data(), nullptr, kCount, kF32, LOOM_REDUCE_SUM, &req), req);
  if (offered(LOOM_OP_ALLGATHER)) expect_refused("allgather recv=NULL", comm.iallgather(a.data(), nullptr, 1, kF32, &req), req);
  if (offered(LOOM_OP_REDUCE_SCATTER)) expect_refused("reduce_scatter send=NULL",
                 comm.ireduce_scatter(nullptr, b.data(), 1, kF32, LOOM_REDUCE_SUM, &req), req);
  if (offered(LOOM_OP_ALLTOALL)) expect_refused("alltoall send=NULL", comm.ialltoall(nullptr, b.data(), 1, kF32, &req), req);
  if (offered(LOOM_OP_ALLTOALL)) expect_refused("alltoall recv=NULL", comm.ialltoall(a.data(), nullptr, 1, kF32, &req), req);
  if (offered(LOOM_OP_SEND_RECV)) expect_refused("send buf=NULL", comm.isend(nullptr, kCount, kF32, 0, &req), req);
  if (offered(LOOM_OP_SEND_RECV)) expect_refused("recv buf=NULL", comm.irecv(nullptr, kCount, kF32, 0, &req), req);
  if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce send=NULL", comm.allreduce(nullptr, b.data(), kCount, kF32, LOOM_REDUCE_SUM));
}

// Overlaps that are not NCCL's in-place forms. Only operations that use both
// buffers on every rank, so that every rank must refuse alike.
void InvalidArgument::bad_overlap() {
  const size_t rank = static_cast<size_t>(World::rank());
  if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce recv = send + 1",
                 comm.iallreduce(a.data(), a.data(1), kCount, kF32, LOOM_REDUCE_SUM, &req), req);
  if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce send = recv + 1",
                 comm.iallreduce(a.data(1), a.data(), kCount, kF32, LOOM_REDUCE_SUM, &req), req);
  // In place would be send == recv + rank * sendcount; one element further
  // still overlaps recv (size * sendcount elements) on every rank.
  const uint64_t sendcount = 3;
  if (offered(LOOM_OP_ALLGATHER)) expect_refused("allgather send = recv + rank * sendcount + 1",
                 comm.iallgather(a.data(rank * sendcount + 1), a.data(), sendcount, kF32, &req), req);
  // In place would be recv == send + rank * recvcount.
  const size_t wrong = rank == 0 ? 1 : 0;  // another offset inside send (2 * size elements)
  if (offered(LOOM_OP_REDUCE_SCATTER)) expect_refused("reduce_scatter recv inside send, not at rank * recvcount",
                 comm.ireduce_scatter(a.data(), a.data(wrong), 2, kF32, LOOM_REDUCE_SUM, &req), req);
  if (offered(LOOM_OP_ALLTOALL)) expect_refused("alltoall recv = send + 1", comm.ialltoall(a.data(), a.data(1), 2, kF32, &req), req);
  if (offered(LOOM_OP_ALLREDUCE)) expect_refused("allreduce recv = send + 1", comm.allreduce(a.data(), a.data(1), kCount, kF32, LOOM_REDUCE_SUM));
}

TEST_P(InvalidArgument, Refused) {
  switch (GetParam()) {
    case Bad::kRoot: root_out_of_range(); break;
    case Bad::kPeer: peer_out_of_range(); break;
    case Bad::kDtype: unknown_dtype(); break;
    case Bad::kReduceOp: unknown_reduce_op(); break;
    case Bad::kNullBuffer: null_buffer_with_count(); break;
    case Bad::kOverlap: bad_overlap(); break;
  }
}

std::string bad_label(Bad bad) {
  switch (bad) {
    case Bad::kRoot: return "root_out_of_range";
    case Bad::kPeer: return "peer_out_of_range";
    case Bad::kDtype: return "unknown_dtype";
    case Bad::kReduceOp: return "unknown_reduce_op";
    case Bad::kNullBuffer: return "null_buffer_with_count";
    default: return "bad_overlap";
  }
}

void PrintTo(Bad bad, std::ostream* os) { *os << bad_label(bad); }

INSTANTIATE_TEST_SUITE_P(, InvalidArgument,
                         testing::Values(Bad::kRoot, Bad::kPeer, Bad::kDtype, Bad::kReduceOp, Bad::kNullBuffer,
                                         Bad::kOverlap),
                         [](const testing::TestParamInfo<Bad>& info) { return bad_label(info.param); });

}  // namespace
}  // namespace conformance
