// SPDX-License-Identifier: Apache-2.0
// The SDK's C++ layer (loom/cxx): each rule of the argument checks, the
// option readers and the negotiation, with the statuses and messages the
// in-tree plugins rely on. A broken rule (an overlap that is not in place
// accepted, a NaN scale accepted, an unknown dtype accepted, ...) fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "loom/cxx/collective.hpp"
#include "loom/cxx/strategy.hpp"

namespace {

using namespace loom::cxx;

bool said(const char *part) { return std::string(last_error_text()).find(part) != std::string::npos; }

// ---- checks.hpp ----

TEST(CxxChecks, BeginClearsRequestAndNeedsComm) {
  loom_request *r = reinterpret_cast<loom_request *>(uintptr_t(1));
  EXPECT_EQ(begin(nullptr, &r, "allreduce"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
  EXPECT_TRUE(said("allreduce: comm is NULL"));
  const loom_comm *comm = reinterpret_cast<const loom_comm *>(uintptr_t(8));
  EXPECT_EQ(begin(comm, nullptr, "allreduce"), LOOM_OK);  // inline completion offered
  EXPECT_EQ(begin(comm, nullptr, "allreduce", "request must not be NULL"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("allreduce: request must not be NULL"));
}

TEST(CxxChecks, UnknownDtypeIsRefused) {
  size_t bytes = 0;
  EXPECT_EQ(check_data(0, 4, "allreduce", &bytes), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("allreduce: unknown dtype 0"));
  EXPECT_EQ(check_data(9, 4, "send", &bytes), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("send: unknown dtype 9"));
  for (loom_dtype d = LOOM_DTYPE_F16; d <= LOOM_DTYPE_I64; ++d) {
    EXPECT_EQ(check_data(d, 3, "x", &bytes), LOOM_OK) << d;
    EXPECT_EQ(bytes, 3 * loom_dtype_size(d));
  }
}

TEST(CxxChecks, CountThatOverflowsIsRefused) {
  size_t bytes = 0;
  EXPECT_EQ(check_data(LOOM_DTYPE_F64, UINT64_MAX / 4, "reduce", &bytes), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("overflows the address space"));
  EXPECT_EQ(check_data(LOOM_DTYPE_U8, UINT64_MAX, "reduce", &bytes), LOOM_OK);  // one byte each: fits
  size_t total = 0;
  EXPECT_EQ(check_total(4, SIZE_MAX / 2, "allgather", &total), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("allgather: 4 blocks of"));
  EXPECT_EQ(check_total(4, 100, "allgather", &total), LOOM_OK);
  EXPECT_EQ(total, 400u);
}

TEST(CxxChecks, ReduceOpMustBeKnown) {
  EXPECT_EQ(check_reduce_op(0, "reduce"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(check_reduce_op(LOOM_REDUCE_AVG + 1, "reduce"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("reduce: unknown reduce op 6"));
  for (loom_reduce_op op = LOOM_REDUCE_SUM; op <= LOOM_REDUCE_AVG; ++op) EXPECT_EQ(check_reduce_op(op, "x"), LOOM_OK);
}

TEST(CxxChecks, ScaleMustBeFiniteAndDtypeFloating) {
  EXPECT_EQ(check_scale(LOOM_DTYPE_F32, std::nan("")), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("allreduce_scaled: scale nan is not a finite number"));
  EXPECT_EQ(check_scale(LOOM_DTYPE_F32, std::numeric_limits<double>::infinity()), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(check_scale(LOOM_DTYPE_I32, 0.5), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("dtype i32 is not a floating type"));
  for (loom_dtype d : {LOOM_DTYPE_F16, LOOM_DTYPE_BF16, LOOM_DTYPE_F32, LOOM_DTYPE_F64})
    EXPECT_EQ(check_scale(d, -0.25), LOOM_OK) << d;
}

TEST(CxxChecks, RanksInRange) {
  EXPECT_EQ(check_rank(4, -1, "broadcast", "root"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("broadcast: root -1 is out of range [0, 4)"));
  EXPECT_EQ(check_rank(4, 4, "send", "peer"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(check_rank(4, 3, "send", "peer"), LOOM_OK);
  EXPECT_EQ(check_rank(4, 4, "recv", "peer"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("recv: peer 4 is out of range [0, 4)"));
}

TEST(CxxChecks, NullBufferOnlyWhenEmpty) {
  EXPECT_EQ(check_buffer(nullptr, 0, "recv", "buf"), LOOM_OK);
  EXPECT_EQ(check_buffer(nullptr, 2, "recv", "buf"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("recv: buf is NULL but count is 2"));
}

TEST(CxxChecks, OverlapOnlyInPlace) {
  char buf[64] = {};
  // Partly overlapping and not in place: refused.
  EXPECT_EQ(check_overlap(buf, 32, buf + 16, 32, false, "allreduce", "send == recv"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("allreduce: send and recv overlap but are not in place (in place needs send == recv)"));
  // In place: allowed; disjoint or touching: allowed; empty: never overlaps.
  EXPECT_EQ(check_overlap(buf, 32, buf, 32, true, "allreduce", "send == recv"), LOOM_OK);
  EXPECT_EQ(check_overlap(buf, 32, buf + 32, 32, false, "allreduce", "send == recv"), LOOM_OK);
  EXPECT_FALSE(overlaps(buf, 0, buf, 32));
  EXPECT_TRUE(overlaps(buf + 31, 1, buf, 32));
  // allgather's in-place slot: send == recv + rank * bytes.
  EXPECT_EQ(at(buf, 16), buf + 16);
}

TEST(CxxChecks, EachOperationsInPlaceRule) {
  float buf[16] = {};
  Layout l;
  const Member rank1{1, 4};
  // allgather: in place is send == recv + rank * sendcount, nothing else.
  EXPECT_EQ(check_allgather(rank1, buf + 4, buf, 4, LOOM_DTYPE_F32, &l), LOOM_OK);
  EXPECT_TRUE(l.in_place);
  EXPECT_EQ(l.total, 16 * sizeof(float));
  EXPECT_EQ(check_allgather(rank1, buf + 2, buf, 4, LOOM_DTYPE_F32, &l), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("allgather: send and recv overlap but are not in place (in place needs send == recv + rank * "));
  EXPECT_EQ(check_allgather(rank1, buf, buf, 4, LOOM_DTYPE_F32, &l), LOOM_ERR_INVALID_ARGUMENT);
  // reduce_scatter: recv == send + rank * recvcount.
  EXPECT_EQ(check_reduce_scatter(rank1, buf, buf + 4, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &l), LOOM_OK);
  EXPECT_TRUE(l.in_place);
  EXPECT_EQ(check_reduce_scatter(rank1, buf, buf, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &l), LOOM_ERR_INVALID_ARGUMENT);
  // alltoall and allreduce: send == recv.
  EXPECT_EQ(check_alltoall(rank1, buf, buf, 4, LOOM_DTYPE_F32, &l), LOOM_OK);
  EXPECT_EQ(check_alltoall(Member{0, 2}, buf, buf + 4, 4, LOOM_DTYPE_F32, &l), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(check_allreduce("allreduce", buf, buf + 1, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, nullptr, &l),
            LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(check_allreduce("allreduce", buf, buf + 4, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, nullptr, &l), LOOM_OK);
  // reduce: recv counts at the root only; broadcast: send at the root only.
  EXPECT_EQ(check_reduce(rank1, buf, nullptr, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, 0, &l), LOOM_OK);
  EXPECT_FALSE(l.at_root);
  EXPECT_EQ(check_reduce(rank1, buf, buf + 1, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, 1, &l), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(check_broadcast(rank1, nullptr, buf, 4, LOOM_DTYPE_F32, 0, &l), LOOM_OK);
  EXPECT_EQ(check_broadcast(rank1, nullptr, buf, 4, LOOM_DTYPE_F32, 1, &l), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("broadcast: send is NULL but count is 4"));
}

TEST(CxxChecks, RuleOrderWithinAnOperation) {
  float buf[4] = {};
  Layout l;
  // An unknown dtype is named before a bad root, a bad root before a NULL buffer.
  EXPECT_EQ(check_reduce(Member{0, 2}, nullptr, nullptr, 4, 99, LOOM_REDUCE_SUM, 5, &l), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("reduce: unknown dtype 99"));
  EXPECT_EQ(check_reduce(Member{0, 2}, nullptr, nullptr, 4, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, 5, &l),
            LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("reduce: root 5 is out of range [0, 2)"));
  // A scaled allreduce checks its scale, not the reduce op.
  const double nan = std::nan("");
  EXPECT_EQ(check_allreduce("allreduce_scaled", buf, buf, 4, LOOM_DTYPE_F32, 0, &nan, &l), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("scale nan is not a finite number"));
  // A backend's count limit, named.
  EXPECT_EQ(check_point_to_point("send", Member{0, 2}, buf, 1000, LOOM_DTYPE_F32, 1, &l, CountLimit{999, "a limit"}),
            LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("send: count 1000 exceeds a limit (999); split the operation"));
}

TEST(CxxChecks, AbortedComesWithTheName) {
  EXPECT_EQ(refuse_if_aborted(false, "barrier", "world"), LOOM_OK);
  EXPECT_EQ(refuse_if_aborted(true, "barrier", "world"), LOOM_ERR_ABORTED);
  EXPECT_TRUE(said("barrier: communicator \"world\" was aborted"));
}

TEST(CxxChecks, Names) {
  EXPECT_STREQ(dtype_name(LOOM_DTYPE_BF16), "bf16");
  EXPECT_STREQ(dtype_name(42), "unknown dtype");
  EXPECT_STREQ(reduce_op_name(LOOM_REDUCE_AVG), "avg");
}

// ---- errors.hpp ----

TEST(CxxErrors, GuardedTurnsExceptionsIntoStatuses) {
  EXPECT_EQ(guarded([]() -> loom_status { throw std::bad_alloc(); }), LOOM_ERR_SYSTEM);
  EXPECT_TRUE(said("out of memory"));
  EXPECT_EQ(guarded([]() -> loom_status { throw std::runtime_error("boom"); }), LOOM_ERR_INTERNAL);
  EXPECT_TRUE(said("unexpected exception: boom"));
  EXPECT_EQ(guarded([]() -> loom_status { return LOOM_OK; }), LOOM_OK);
}

// ---- options.hpp ----

struct FakeHost {
  std::map<std::string, std::string> values;
  std::vector<std::string> warnings;
  loom_host_v1 host{};

  FakeHost() {
    host.struct_size = sizeof host;
    host.host_ctx = this;
    host.get_option = [](void *ctx, const char *name, const char **value) -> loom_status {
      auto &self = *static_cast<FakeHost *>(ctx);
      auto it = self.values.find(name);
      if (it == self.values.end()) return LOOM_ERR_UNAVAILABLE;
      *value = it->second.c_str();
      return LOOM_OK;
    };
    host.log = [](void *ctx, loom_log_level, const char *message) {
      static_cast<FakeHost *>(ctx)->warnings.push_back(message);
    };
  }
};

loom_option_decl decl(const char *name, const char *default_value, loom_option_type type = LOOM_OPTION_INT) {
  return {sizeof(loom_option_decl), type, name, default_value, "test option"};
}

TEST(CxxOptions, IntRangeAndMessage) {
  FakeHost h;
  const Options o(h.host);
  int64_t v = 0;
  h.values["timeout_ms"] = "250";
  EXPECT_EQ(o.get_int(decl("timeout_ms", "1"), 1, &v), LOOM_OK);
  EXPECT_EQ(v, 250);
  h.values["timeout_ms"] = "0";
  EXPECT_EQ(o.get_int(decl("timeout_ms", "1"), 1, &v), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("option timeout_ms = \"0\" is not an integer >= 1"));
  h.values["timeout_ms"] = "12abc";
  EXPECT_EQ(o.get_int(decl("timeout_ms", "1"), 1, &v), LOOM_ERR_INVALID_ARGUMENT);
  h.values["timeout_ms"] = "70";
  EXPECT_EQ(o.get_int(decl("timeout_ms", "1"), 1, &v, 64), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("is not an integer in [1, 64]"));
}

TEST(CxxOptions, DefaultWithWarningWhenTheHostCannotAnswer) {
  FakeHost h;
  const Options o(h.host);
  int64_t v = 0;
  EXPECT_EQ(o.get_int(decl("spin_us", "20"), 0, &v), LOOM_OK);
  EXPECT_EQ(v, 20);
  ASSERT_EQ(h.warnings.size(), 1u);
  EXPECT_NE(h.warnings[0].find("host could not give option spin_us"), std::string::npos);
}

TEST(CxxOptions, BoolIsTrueOrFalse) {
  FakeHost h;
  const Options o(h.host);
  bool b = false;
  h.values["blocking"] = "true";
  EXPECT_EQ(o.get_bool(decl("blocking", "false", LOOM_OPTION_BOOL), &b), LOOM_OK);
  EXPECT_TRUE(b);
  h.values["blocking"] = "yes";
  EXPECT_EQ(o.get_bool(decl("blocking", "false", LOOM_OPTION_BOOL), &b), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("option blocking: \"yes\" is not true or false"));
}

TEST(CxxOptions, DoubleRefusesNaNAndRange) {
  FakeHost h;
  const Options o(h.host);
  double d = 0;
  for (const char *bad : {"nan", "inf", "0", "-1", "2e6", "x"}) {
    h.values["bucket_mb"] = bad;
    EXPECT_EQ(o.get_double(decl("bucket_mb", "25", LOOM_OPTION_FLOAT), 0, 1024 * 1024, &d), LOOM_ERR_INVALID_ARGUMENT)
        << bad;
  }
  EXPECT_TRUE(said("option bucket_mb = \"x\" is not a number > 0 (and <= 1048576)"));
  h.values["bucket_mb"] = "0.5";
  EXPECT_EQ(o.get_double(decl("bucket_mb", "25", LOOM_OPTION_FLOAT), 0, 1024 * 1024, &d), LOOM_OK);
  EXPECT_EQ(d, 0.5);
}

TEST(CxxOptions, StringsAndLists) {
  FakeHost h;
  const Options o(h.host);
  std::string s;
  h.values["collective"] = "";
  EXPECT_EQ(o.get_string(decl("collective", "mpi", LOOM_OPTION_STRING), &s, "name one"), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(said("option collective is empty; name one"));
  EXPECT_EQ(o.get_string(decl("collective", "mpi", LOOM_OPTION_STRING), &s), LOOM_OK);
  std::vector<std::string> items;
  h.values["transports"] = " sm, self ,tcp";
  EXPECT_EQ(o.get_list(decl("transports", "", LOOM_OPTION_STRING_LIST), &items), LOOM_OK);
  EXPECT_EQ(items, (std::vector<std::string>{"sm", "self", "tcp"}));
  h.values["transports"] = "";
  EXPECT_EQ(o.get_list(decl("transports", "", LOOM_OPTION_STRING_LIST), &items), LOOM_OK);
  EXPECT_TRUE(items.empty());
  h.values["transports"] = "sm,,tcp";
  EXPECT_EQ(o.get_list(decl("transports", "", LOOM_OPTION_STRING_LIST), &items), LOOM_ERR_INVALID_ARGUMENT);
}

// ---- negotiate.hpp ----

TEST(CxxNegotiate, ChoosesTheNewestCommonVersionOrRefuses) {
  static const int vtable = 0;
  static constexpr Refusals kRefusals = LOOM_CXX_REFUSALS("test collective plugin", "collective");
  loom_negotiate_request request{};
  request.struct_size = sizeof request;
  request.kind = LOOM_KIND_COLLECTIVE;
  request.abi_min = LOOM_ABI_MAKE(1, 0);
  request.abi_max = LOOM_ABI_MAKE(1, 99);
  loom_negotiate_reply reply{};
  reply.struct_size = sizeof reply;
  EXPECT_EQ(negotiate(&request, &reply, LOOM_KIND_COLLECTIVE, LOOM_ABI_VERSION_MIN, &vtable, kRefusals), LOOM_OK);
  EXPECT_EQ(reply.abi_version, uint32_t(LOOM_ABI_VERSION));
  EXPECT_EQ(reply.vtable, &vtable);
  request.kind = LOOM_KIND_STRATEGY;
  EXPECT_EQ(negotiate(&request, &reply, LOOM_KIND_COLLECTIVE, LOOM_ABI_VERSION_MIN, &vtable, kRefusals),
            LOOM_ERR_UNSUPPORTED);
  EXPECT_STREQ(reply.refusal, "test collective plugin: called for a kind other than collective");
  request.kind = LOOM_KIND_COLLECTIVE;
  request.abi_max = LOOM_ABI_MAKE(1, 0);
  EXPECT_EQ(negotiate(&request, &reply, LOOM_KIND_COLLECTIVE, LOOM_ABI_MAKE(1, 1), &vtable, kRefusals),
            LOOM_ERR_UNSUPPORTED);
  EXPECT_STREQ(reply.refusal, "test collective plugin speaks Loom ABI " LOOM_CXX_ABI_RANGE);
  EXPECT_EQ(negotiate(nullptr, &reply, LOOM_KIND_COLLECTIVE, LOOM_ABI_VERSION_MIN, &vtable, kRefusals),
            LOOM_ERR_UNSUPPORTED);
}

}  // namespace
