// SPDX-License-Identifier: Apache-2.0
// large_allreduce_test.cpp: a 4 Mi-element f32 allreduce (16 MiB), past
// every eager/small-message threshold, checked exactly.
//
// Case names: LargeAllreduce.Exact/f32_sum_outofplace_blocking.
#include <string>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

struct LargeParam {
  bool in_place;
  Mode mode;
};
void PrintTo(const LargeParam& p, std::ostream* os) {
  *os << (p.in_place ? "inplace_" : "outofplace_") << mode_label(p.mode);
}

class LargeAllreduce : public testing::TestWithParam<LargeParam> {};

TEST_P(LargeAllreduce, Exact) {
  CONFORMANCE_NEEDS(LOOM_OP_ALLREDUCE);
  const LargeParam p = GetParam();
  loom::Communicator& comm = World::comm();
  const size_t count = size_t{4} << 20;
  const ReduceInputs in{LOOM_DTYPE_F32, LOOM_REDUCE_SUM, case_seed(p.in_place ? "large/in" : "large/out"),
                        comm.size()};
  Buffer send(LOOM_DTYPE_F32, count), recv(LOOM_DTYPE_F32, count);
  send.fill(0, count, [&](size_t i) { return in.input(comm.rank(), i); });
  void* out = p.in_place ? send.data() : recv.data();
  const loom::Status s = run(
      p.mode, [&] { return comm.allreduce(send.data(), out, count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM); },
      [&](loom::Request* r) { return comm.iallreduce(send.data(), out, count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, r); });
  ASSERT_TRUE(is_ok(s));
  Buffer& result = p.in_place ? send : recv;
  EXPECT_TRUE(holds(result, 0, count, [&](size_t i) { return in.reference(i); }));
  EXPECT_TRUE(guard_intact(result));
}

INSTANTIATE_TEST_SUITE_P(, LargeAllreduce,
                         testing::Values(LargeParam{false, Mode::kBlocking}, LargeParam{true, Mode::kNonBlocking}),
                         [](const testing::TestParamInfo<LargeParam>& info) {
                           return std::string("f32_sum_") + (info.param.in_place ? "inplace_" : "outofplace_") +
                                  mode_label(info.param.mode);
                         });

}  // namespace
}  // namespace conformance
