// SPDX-License-Identifier: Apache-2.0
// data_movement_test.cpp: broadcast (every root), allgather and alltoall over
// every dtype x {in place, out of place} x every Mode (run_op.hpp), each at
// odd counts, checked byte for byte.
//
// Case names: Broadcast.Exact/bf16_outofplace_blocking.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

struct MoveParam {
  loom_dtype dtype;
  bool in_place;
  Mode mode;

  std::string name() const { return dtype_label(dtype) + (in_place ? "_inplace_" : "_outofplace_") + mode_label(mode); }
  uint64_t seed(const std::string& collective, size_t count) const {
    return case_seed(collective + "/" + name() + "/" + std::to_string(count));
  }
};

std::vector<MoveParam> all_move_params() {
  std::vector<MoveParam> params;
  for (loom_dtype dtype : all_dtypes())
    for (bool in_place : {true, false})
      for (Mode mode : all_modes()) params.push_back({dtype, in_place, mode});
  return params;
}

std::string param_name(const testing::TestParamInfo<MoveParam>& info) { return info.param.name(); }
void PrintTo(const MoveParam& p, std::ostream* os) { *os << p.name(); }

class Broadcast : public testing::TestWithParam<MoveParam> {};
class Allgather : public testing::TestWithParam<MoveParam> {};
class Alltoall : public testing::TestWithParam<MoveParam> {};

TEST_P(Broadcast, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_BROADCAST);
  const MoveParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  for (int32_t root = 0; root < comm.size(); ++root) {
    for (size_t count : odd_counts()) {
      SCOPED_TRACE("root " + std::to_string(root) + ", count " + std::to_string(count));
      const uint64_t seed = p.seed("broadcast/root" + std::to_string(root), count);
      auto payload = [&](size_t i) { return movement_value(p.dtype, seed, root, i); };
      Buffer send(p.dtype, count), recv(p.dtype, count);
      // send is read at root only: elsewhere it holds something else.
      if (comm.rank() == root) {
        send.fill(0, count, payload);
      } else if (!p.in_place) {
        send.fill(0, count, [&](size_t i) { return movement_value(p.dtype, ~seed, comm.rank(), i); });
      }
      void* out = p.in_place ? send.data() : recv.data();
      const loom::Status s = run(
          p.mode, [&] { return comm.broadcast(send.data(), out, count, p.dtype, root); },
          [&](loom::Request* r) { return comm.ibroadcast(send.data(), out, count, p.dtype, root, r); });
      EXPECT_TRUE(is_ok(s));
      if (!s.is_ok()) continue;  // keep posting what the other ranks post
      Buffer& result = p.in_place ? send : recv;
      EXPECT_TRUE(holds(result, 0, count, payload));
      EXPECT_TRUE(guard_intact(result));
      if (!p.in_place && comm.rank() == root) {
        EXPECT_TRUE(holds(send, 0, count, payload)) << "root's send changed";
      }
    }
  }
}

TEST_P(Allgather, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_ALLGATHER);
  const MoveParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  const size_t size = static_cast<size_t>(comm.size());
  const size_t rank = static_cast<size_t>(comm.rank());
  for (size_t count : odd_counts()) {  // count = sendcount
    SCOPED_TRACE("sendcount " + std::to_string(count));
    const uint64_t seed = p.seed("allgather", count);
    auto block_of = [&](int r) { return [&, r](size_t i) { return movement_value(p.dtype, seed, r, i); }; };
    Buffer send(p.dtype, count), recv(p.dtype, size * count);
    // In place: send == recv + rank * sendcount, already holding this rank's block.
    if (p.in_place) recv.fill(rank * count, count, block_of(comm.rank()));
    else send.fill(0, count, block_of(comm.rank()));
    const void* in = p.in_place ? recv.data(rank * count) : send.data();
    const loom::Status s = run(
        p.mode, [&] { return comm.allgather(in, recv.data(), count, p.dtype); },
        [&](loom::Request* r) { return comm.iallgather(in, recv.data(), count, p.dtype, r); });
    EXPECT_TRUE(is_ok(s));
    if (!s.is_ok()) continue;
    EXPECT_TRUE(holds(recv, 0, size * count,
                      [&](size_t j) { return movement_value(p.dtype, seed, static_cast<int>(j / count), j % count); }));
    EXPECT_TRUE(guard_intact(recv));
    if (!p.in_place) {
      EXPECT_TRUE(holds(send, 0, count, block_of(comm.rank()))) << "send changed";
    }
  }
}

TEST_P(Alltoall, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_ALLTOALL);
  const MoveParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  const size_t size = static_cast<size_t>(comm.size());
  const size_t rank = static_cast<size_t>(comm.rank());
  for (size_t count : odd_counts()) {  // count per block
    SCOPED_TRACE("count " + std::to_string(count));
    const uint64_t seed = p.seed("alltoall", count);
    // Element j of rank r's send: block j / count, destined to rank j / count.
    auto sent_by = [&](int r) { return [&, r](size_t j) { return movement_value(p.dtype, seed, r, j); }; };
    Buffer send(p.dtype, size * count), recv(p.dtype, size * count);
    send.fill(0, size * count, sent_by(comm.rank()));
    void* out = p.in_place ? send.data() : recv.data();
    const loom::Status s = run(
        p.mode, [&] { return comm.alltoall(send.data(), out, count, p.dtype); },
        [&](loom::Request* r) { return comm.ialltoall(send.data(), out, count, p.dtype, r); });
    EXPECT_TRUE(is_ok(s));
    if (!s.is_ok()) continue;
    // Block i of my recv is block `rank` of rank i's send.
    Buffer& result = p.in_place ? send : recv;
    EXPECT_TRUE(holds(result, 0, size * count, [&](size_t j) {
      return movement_value(p.dtype, seed, static_cast<int>(j / count), rank * count + j % count);
    }));
    EXPECT_TRUE(guard_intact(result));
    if (!p.in_place) {
      EXPECT_TRUE(holds(send, 0, size * count, sent_by(comm.rank()))) << "send changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, Broadcast, testing::ValuesIn(all_move_params()), param_name);
INSTANTIATE_TEST_SUITE_P(, Allgather, testing::ValuesIn(all_move_params()), param_name);
INSTANTIATE_TEST_SUITE_P(, Alltoall, testing::ValuesIn(all_move_params()), param_name);

}  // namespace
}  // namespace conformance
