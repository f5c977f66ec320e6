// SPDX-License-Identifier: Apache-2.0
// reduce_ops_test.cpp: allreduce, reduce (every root) and reduce_scatter,
// over every dtype x reduce op x {in place, out of place} x every Mode
// (run_op.hpp), each at odd counts, checked exactly against a reference
// computed from every rank's reproducible inputs.
//
// Case names: Allreduce.Exact/f16_sum_inplace_nonblocking.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

struct ReduceParam {
  loom_dtype dtype;
  loom_reduce_op op;
  bool in_place;
  Mode mode;

  std::string name() const {
    return dtype_label(dtype) + "_" + reduce_op_label(op) + (in_place ? "_inplace_" : "_outofplace_") +
           mode_label(mode);
  }
  ReduceInputs inputs(const std::string& collective, size_t count) const {
    return ReduceInputs{dtype, op, case_seed(collective + "/" + name() + "/" + std::to_string(count)), World::size()};
  }
};

std::vector<ReduceParam> all_reduce_params() {
  std::vector<ReduceParam> params;
  for (loom_dtype dtype : all_dtypes())
    for (loom_reduce_op op : all_reduce_ops())
      for (bool in_place : {true, false})
        for (Mode mode : all_modes()) params.push_back({dtype, op, in_place, mode});
  return params;
}

std::string param_name(const testing::TestParamInfo<ReduceParam>& info) { return info.param.name(); }
void PrintTo(const ReduceParam& p, std::ostream* os) { *os << p.name(); }

class Allreduce : public testing::TestWithParam<ReduceParam> {};
class Reduce : public testing::TestWithParam<ReduceParam> {};
class ReduceScatter : public testing::TestWithParam<ReduceParam> {};

TEST_P(Allreduce, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_ALLREDUCE);
  const ReduceParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  for (size_t count : odd_counts()) {
    SCOPED_TRACE("count " + std::to_string(count));
    const ReduceInputs in = p.inputs("allreduce", count);
    Buffer send(p.dtype, count), recv(p.dtype, count);
    send.fill(0, count, [&](size_t i) { return in.input(comm.rank(), i); });
    void* out = p.in_place ? send.data() : recv.data();
    const loom::Status s = run(
        p.mode, [&] { return comm.allreduce(send.data(), out, count, p.dtype, p.op); },
        [&](loom::Request* r) { return comm.iallreduce(send.data(), out, count, p.dtype, p.op, r); });
    EXPECT_TRUE(is_ok(s));
    if (!s.is_ok()) continue;  // keep posting what the other ranks post
    Buffer& result = p.in_place ? send : recv;
    EXPECT_TRUE(holds(result, 0, count, [&](size_t i) { return in.reference(i); }));
    EXPECT_TRUE(guard_intact(result));
    if (!p.in_place) {
      EXPECT_TRUE(holds(send, 0, count, [&](size_t i) { return in.input(comm.rank(), i); }));
    }
  }
}

TEST_P(Reduce, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_REDUCE);
  const ReduceParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  for (int32_t root = 0; root < comm.size(); ++root) {
    for (size_t count : odd_counts()) {
      SCOPED_TRACE("root " + std::to_string(root) + ", count " + std::to_string(count));
      const ReduceInputs in = p.inputs("reduce/root" + std::to_string(root), count);
      auto mine = [&](size_t i) { return in.input(comm.rank(), i); };
      Buffer send(p.dtype, count), recv(p.dtype, count);
      send.fill(0, count, mine);
      void* out = p.in_place ? send.data() : recv.data();
      const loom::Status s = run(
          p.mode, [&] { return comm.reduce(send.data(), out, count, p.dtype, p.op, root); },
          [&](loom::Request* r) { return comm.ireduce(send.data(), out, count, p.dtype, p.op, root, r); });
      EXPECT_TRUE(is_ok(s));
      if (!s.is_ok()) continue;  // keep posting what the other ranks post
      Buffer& result = p.in_place ? send : recv;
      if (comm.rank() == root) {
        EXPECT_TRUE(holds(result, 0, count, [&](size_t i) { return in.reference(i); }));
      } else if (p.in_place) {
        EXPECT_TRUE(holds(send, 0, count, mine)) << "a non-root's buffer changed (recv is written at root only)";
      } else {
        EXPECT_TRUE(untouched(recv, 0, count)) << "a non-root's recv was written (recv is written at root only)";
      }
      EXPECT_TRUE(guard_intact(result));
      if (!p.in_place) {
        EXPECT_TRUE(holds(send, 0, count, mine)) << "send changed";
      }
    }
  }
}

TEST_P(ReduceScatter, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_REDUCE_SCATTER);
  const ReduceParam p = GetParam();
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  loom::Communicator& comm = World::comm();
  const size_t size = static_cast<size_t>(comm.size());
  const size_t rank = static_cast<size_t>(comm.rank());
  for (size_t count : odd_counts()) {  // count = recvcount
    SCOPED_TRACE("recvcount " + std::to_string(count));
    const ReduceInputs in = p.inputs("reduce_scatter", count);
    Buffer send(p.dtype, size * count), recv(p.dtype, count);
    send.fill(0, size * count, [&](size_t i) { return in.input(comm.rank(), i); });
    // In place: recv == send + rank * recvcount.
    void* out = p.in_place ? send.data(rank * count) : recv.data();
    const loom::Status s = run(
        p.mode, [&] { return comm.reduce_scatter(send.data(), out, count, p.dtype, p.op); },
        [&](loom::Request* r) { return comm.ireduce_scatter(send.data(), out, count, p.dtype, p.op, r); });
    EXPECT_TRUE(is_ok(s));
    if (!s.is_ok()) continue;  // keep posting what the other ranks post
    Buffer& result = p.in_place ? send : recv;
    const size_t offset = p.in_place ? rank * count : 0;
    EXPECT_TRUE(holds(result, offset, count, [&](size_t i) { return in.reference(rank * count + i); }));
    EXPECT_TRUE(guard_intact(result));
    if (!p.in_place) {
      EXPECT_TRUE(holds(send, 0, size * count, [&](size_t i) { return in.input(comm.rank(), i); })) << "send changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, Allreduce, testing::ValuesIn(all_reduce_params()), param_name);
INSTANTIATE_TEST_SUITE_P(, Reduce, testing::ValuesIn(all_reduce_params()), param_name);
INSTANTIATE_TEST_SUITE_P(, ReduceScatter, testing::ValuesIn(all_reduce_params()), param_name);

}  // namespace
}  // namespace conformance
