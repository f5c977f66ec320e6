// SPDX-License-Identifier: Apache-2.0
// zero_count_test.cpp: every operation with count 0 is a no-op that returns
// OK and writes nothing, blocking and not, with real buffers and with NULL
// ones (an empty tensor's data pointer may well be NULL).
//
// Case names: ZeroCount.NoOp/reduce_scatter_nonblocking_null.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

enum class ZeroOp { kAllreduce, kBroadcast, kReduce, kAllgather, kReduceScatter, kAlltoall, kSendRecv };

uint64_t zero_op_bit(ZeroOp op) {
  switch (op) {
    case ZeroOp::kAllreduce: return LOOM_OP_ALLREDUCE;
    case ZeroOp::kBroadcast: return LOOM_OP_BROADCAST;
    case ZeroOp::kReduce: return LOOM_OP_REDUCE;
    case ZeroOp::kAllgather: return LOOM_OP_ALLGATHER;
    case ZeroOp::kReduceScatter: return LOOM_OP_REDUCE_SCATTER;
    case ZeroOp::kAlltoall: return LOOM_OP_ALLTOALL;
    default: return LOOM_OP_SEND_RECV;
  }
}

const char* zero_op_label(ZeroOp op) {
  switch (op) {
    case ZeroOp::kAllreduce: return "allreduce";
    case ZeroOp::kBroadcast: return "broadcast";
    case ZeroOp::kReduce: return "reduce";
    case ZeroOp::kAllgather: return "allgather";
    case ZeroOp::kReduceScatter: return "reduce_scatter";
    case ZeroOp::kAlltoall: return "alltoall";
    default: return "sendrecv";
  }
}

struct ZeroParam {
  ZeroOp op;
  Mode mode;
  bool null_buffers;
  std::string name() const {
    return std::string(zero_op_label(op)) + "_" + mode_label(mode) + (null_buffers ? "_null" : "");
  }
};
void PrintTo(const ZeroParam& p, std::ostream* os) { *os << p.name(); }

std::vector<ZeroParam> all_zero_params() {
  std::vector<ZeroParam> params;
  for (ZeroOp op : {ZeroOp::kAllreduce, ZeroOp::kBroadcast, ZeroOp::kReduce, ZeroOp::kAllgather,
                    ZeroOp::kReduceScatter, ZeroOp::kAlltoall, ZeroOp::kSendRecv})
    for (Mode mode : all_modes())
      for (bool null_buffers : {false, true}) params.push_back({op, mode, null_buffers});
  return params;
}

class ZeroCount : public testing::TestWithParam<ZeroParam> {};

TEST_P(ZeroCount, NoOp) {
  const ZeroParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  CONFORMANCE_NEEDS(zero_op_bit(p.op));
  loom::Communicator& comm = World::comm();
  if (p.op == ZeroOp::kSendRecv && p.mode != Mode::kNonBlocking && comm.size() == 1)
    GTEST_SKIP() << "a blocking send to oneself cannot be matched";
  const loom_dtype dt = LOOM_DTYPE_F32;
  Buffer send_buf(dt, 0), recv_buf(dt, 0);
  void* send = p.null_buffers ? nullptr : send_buf.data();
  void* recv = p.null_buffers ? nullptr : recv_buf.data();
  const int32_t root = comm.size() - 1;
  loom::Status s;
  switch (p.op) {
    case ZeroOp::kAllreduce:
      s = run(p.mode, [&] { return comm.allreduce(send, recv, 0, dt, LOOM_REDUCE_SUM); },
              [&](loom::Request* r) { return comm.iallreduce(send, recv, 0, dt, LOOM_REDUCE_SUM, r); });
      break;
    case ZeroOp::kBroadcast:
      s = run(p.mode, [&] { return comm.broadcast(send, recv, 0, dt, root); },
              [&](loom::Request* r) { return comm.ibroadcast(send, recv, 0, dt, root, r); });
      break;
    case ZeroOp::kReduce:
      s = run(p.mode, [&] { return comm.reduce(send, recv, 0, dt, LOOM_REDUCE_MAX, root); },
              [&](loom::Request* r) { return comm.ireduce(send, recv, 0, dt, LOOM_REDUCE_MAX, root, r); });
      break;
    case ZeroOp::kAllgather:
      s = run(p.mode, [&] { return comm.allgather(send, recv, 0, dt); },
              [&](loom::Request* r) { return comm.iallgather(send, recv, 0, dt, r); });
      break;
    case ZeroOp::kReduceScatter:
      s = run(p.mode, [&] { return comm.reduce_scatter(send, recv, 0, dt, LOOM_REDUCE_AVG); },
              [&](loom::Request* r) { return comm.ireduce_scatter(send, recv, 0, dt, LOOM_REDUCE_AVG, r); });
      break;
    case ZeroOp::kAlltoall:
      s = run(p.mode, [&] { return comm.alltoall(send, recv, 0, dt); },
              [&](loom::Request* r) { return comm.ialltoall(send, recv, 0, dt, r); });
      break;
    case ZeroOp::kSendRecv:
      s = ring_exchange(comm, p.mode, send, recv, 0, dt, World::timeout_ms());
      break;
  }
  EXPECT_TRUE(is_ok(s));
  EXPECT_TRUE(guard_intact(send_buf));
  EXPECT_TRUE(guard_intact(recv_buf));
  // The communicator still works, and nothing of the no-op is left to match.
  EXPECT_TRUE(still_works(comm));
}

INSTANTIATE_TEST_SUITE_P(, ZeroCount, testing::ValuesIn(all_zero_params()),
                         [](const testing::TestParamInfo<ZeroParam>& info) { return info.param.name(); });

}  // namespace
}  // namespace conformance
