// SPDX-License-Identifier: Apache-2.0
// scaled_allreduce_test.cpp: allreduce_scaled (ABI 1.3), scale x the sum,
// over every floating dtype x {in place, out of place} x every Mode, at odd
// counts and at 1 Mi elements (past the small-message algorithms), checked
// exactly: the scale is a power of two, so scaling rounds nothing. An
// out-of-place call leaves send as it was (callers retry from it). Then its
// bad arguments, and, for plugins that do not offer it, the host's refusal.
//
// Case names: ScaledAllreduce.Exact/f32_inplace_blocking, ScaledAllreduce.Refused.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

constexpr double kScale = -0.5;  // exact in every floating dtype, and it flips the sign

struct ScaledParam {
  loom_dtype dtype;
  bool in_place;
  Mode mode;
  std::string name() const {
    return dtype_label(dtype) + (in_place ? "_inplace_" : "_outofplace_") + mode_label(mode);
  }
};
void PrintTo(const ScaledParam& p, std::ostream* os) { *os << p.name(); }

std::vector<ScaledParam> scaled_params() {
  std::vector<ScaledParam> params;
  for (loom_dtype dtype : {LOOM_DTYPE_F16, LOOM_DTYPE_BF16, LOOM_DTYPE_F32, LOOM_DTYPE_F64})
    for (bool in_place : {true, false})
      for (Mode mode : all_modes()) params.push_back({dtype, in_place, mode});
  return params;
}

#define SKIP_UNLESS_OFFERED(comm) \
  if (!(comm).offers_scaled_allreduce()) GTEST_SKIP() << "the plugin does not offer allreduce_scaled"

class ScaledAllreduce : public testing::TestWithParam<ScaledParam> {};

TEST_P(ScaledAllreduce, Exact) {
  const ScaledParam p = GetParam();
  loom::Communicator& comm = World::comm();
  SKIP_UNLESS_OFFERED(comm);
  CONFORMANCE_SKIP_REDUNDANT(p.mode);
  std::vector<size_t> counts = odd_counts();
  counts.push_back(size_t{1} << 20);
  for (size_t count : counts) {
    SCOPED_TRACE("count " + std::to_string(count));
    const ReduceInputs in{p.dtype, LOOM_REDUCE_SUM, case_seed("scaled/" + p.name() + "/" + std::to_string(count)),
                          comm.size()};
    Buffer send(p.dtype, count), recv(p.dtype, count);
    send.fill(0, count, [&](size_t i) { return in.input(comm.rank(), i); });
    void* out = p.in_place ? send.data() : recv.data();
    // Blocking and post-wait are the same call here (allreduce_scaled has no
    // inline form); non-blocking polls test() first.
    const loom::Status s = run(
        p.mode, [&] { return comm.allreduce_scaled(send.data(), out, count, p.dtype, kScale); },
        [&](loom::Request* r) { return comm.iallreduce_scaled(send.data(), out, count, p.dtype, kScale, r); });
    EXPECT_TRUE(is_ok(s));
    if (!s.is_ok()) continue;  // keep posting what the other ranks post
    Buffer& result = p.in_place ? send : recv;
    EXPECT_TRUE(holds(result, 0, count, [&](size_t i) { return kScale * in.reference(i); }));
    EXPECT_TRUE(guard_intact(result));
    if (!p.in_place) {
      EXPECT_TRUE(holds(send, 0, count, [&](size_t i) { return in.input(comm.rank(), i); }))
          << "an out-of-place allreduce_scaled wrote into send";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, ScaledAllreduce, testing::ValuesIn(scaled_params()),
                         [](const testing::TestParamInfo<ScaledParam>& info) { return info.param.name(); });

// Integer dtypes and a scale that is not a finite number are refused on
// every rank alike, with a reason and no request; the communicator then
// still works. A plugin that does not offer the operation gets
// LOOM_ERR_UNSUPPORTED from the host, naming the plugin.
TEST(ScaledAllreduceArguments, Refused) {
  loom::Communicator& comm = World::comm();
  Buffer send(LOOM_DTYPE_F32, 4), recv(LOOM_DTYPE_F32, 4);
  send.fill(0, 4, [](size_t i) { return double(i); });
  if (!comm.offers_scaled_allreduce()) {
    loom::Request request;
    const loom::Status s = comm.iallreduce_scaled(send.data(), recv.data(), 4, LOOM_DTYPE_F32, 1.0, &request);
    EXPECT_TRUE(has_code(s, LOOM_ERR_UNSUPPORTED));
    EXPECT_NE(s.message().find(comm.collective().descriptor().name), std::string::npos) << s.message();
    EXPECT_FALSE(request.valid());
    return;
  }
  Buffer ints(LOOM_DTYPE_I32, 4), int_out(LOOM_DTYPE_I32, 4);
  ints.fill(0, 4, [](size_t i) { return double(i); });
  struct Case {
    const char* what;
    const void* send;
    void* recv;
    loom_dtype dtype;
    double scale;
  };
  const Case cases[] = {
      {"an integer dtype", ints.data(), int_out.data(), LOOM_DTYPE_I32, 1.0},
      {"a NaN scale", send.data(), recv.data(), LOOM_DTYPE_F32, std::nan("")},
      {"an infinite scale", send.data(), recv.data(), LOOM_DTYPE_F32, std::numeric_limits<double>::infinity()},
      {"overlapping buffers", send.data(), send.data(1), LOOM_DTYPE_F32, 1.0},
  };
  for (const Case& c : cases) {
    loom::Request request;
    const loom::Status s = comm.iallreduce_scaled(c.send, c.recv, 3, c.dtype, c.scale, &request);
    EXPECT_TRUE(has_code(s, LOOM_ERR_INVALID_ARGUMENT)) << c.what;
    EXPECT_FALSE(s.message().empty()) << c.what << ": no reason given";
    EXPECT_FALSE(request.valid()) << c.what << ": a request was handed out although the post failed";
  }
  // Still in step: one good call with a scale that is not a power of two,
  // checked against the sum times the scale within one rounding.
  const double third = 1.0 / 3.0;
  ASSERT_TRUE(is_ok(comm.allreduce_scaled(send.data(), recv.data(), 4, LOOM_DTYPE_F32, third)));
  for (size_t i = 0; i < 4; ++i) {
    float got;
    std::memcpy(&got, recv.data(i), sizeof got);
    const double want = third * double(i) * comm.size();
    EXPECT_NEAR(got, want, 1e-6 * (1 + want)) << "element " << i;
  }
}

}  // namespace
}  // namespace conformance
