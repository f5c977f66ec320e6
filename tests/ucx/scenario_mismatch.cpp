// SPDX-License-Identifier: Apache-2.0
// scenario_mismatch.cpp: ranks post the same operation with different
// arguments. The odd rank out, and every rank whose result depends on it,
// must get INVALID_ARGUMENT promptly (not a timeout, never a wrong result);
// a rank whose whole result comes from ranks that agree with it (the
// broadcast case: rank 1 gets root 0's data while rank n-1 believes the root
// is 1) may finish first with that right result. The communicator must stay
// usable afterwards.
#include <chrono>
#include <algorithm>
#include <cstring>
#include <vector>

#include "rank_common.hpp"

namespace ucx_rank {
namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  // Runs this rank's (possibly different) version of the operation.
  loom::Status (*run)(loom::Communicator& comm, std::vector<char>& a, std::vector<char>& b);
  // Whether this rank may finish with LOOM_OK (its result is then checked).
  bool may_finish = false;
};

// The odd one out is the last rank, so with 3+ ranks some ranks only hear
// of the mismatch from others.
bool odd(const loom::Communicator& c) { return c.rank() == c.size() - 1; }

const Case kCases[] = {
    {"count", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce(a.data(), b.data(), odd(c) ? 12 : 10, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
     }},
    {"dtype_same_size", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce(a.data(), b.data(), 10, odd(c) ? LOOM_DTYPE_I32 : LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
     }},
    {"reduce_op", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce(a.data(), b.data(), 10, LOOM_DTYPE_F32, odd(c) ? LOOM_REDUCE_MAX : LOOM_REDUCE_SUM);
     }},
    {"count_across_algorithms", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce(a.data(), b.data(), odd(c) ? (1 << 20) : 1000, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
     }},
    {"large_count", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce(a.data(), b.data(), odd(c) ? (1 << 20) : (1 << 20) - 1, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
     }},
    {"broadcast_root", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.broadcast(a.data(), b.data(), 100, LOOM_DTYPE_F32, odd(c) ? 1 : 0);
     }, true},
    {"operation", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       if (odd(c)) return c.barrier();
       return c.allgather(a.data(), b.data(), 4, LOOM_DTYPE_F32);
     }},
    {"allgather_count", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allgather(a.data(), b.data(), odd(c) ? 100 : 99, LOOM_DTYPE_F32);
     }},
    // allreduce_scaled's scale must be the same bits on every rank, or the
    // ranks would hold different results; ring and recursive doubling alike.
    {"scale", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce_scaled(a.data(), b.data(), 10, LOOM_DTYPE_F32, odd(c) ? 0.25 : 0.5);
     }},
    {"scale_large", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       return c.allreduce_scaled(a.data(), b.data(), 1 << 20, LOOM_DTYPE_F32, odd(c) ? 1.0 / 3 : 1.0 / 3 + 1e-16);
     }},
    {"scaled_and_plain_sum", [](loom::Communicator& c, std::vector<char>& a, std::vector<char>& b) {
       if (odd(c)) return c.allreduce(a.data(), b.data(), 10, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
       return c.allreduce_scaled(a.data(), b.data(), 10, LOOM_DTYPE_F32, 1.0);
     }},
};

}  // namespace

int scenario_mismatch(Rank& rk) {
  std::unique_ptr<loom::Communicator> comm = rk.world();
  if (!comm) return 1;
  loom::Status s;
  std::vector<char> x(size_t(32) << 20), y(size_t(32) << 20);
  for (size_t i = 0; i + sizeof(float) <= x.size(); i += sizeof(float)) {
    const float one = 1.0f;
    std::memcpy(&x[i], &one, sizeof one);
  }
  int bad = 0;
  for (const Case& c : kCases) {
    std::fill(y.begin(), y.begin() + 4096, char(0));
    const auto t0 = Clock::now();
    s = c.run(*comm, x, y);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    report(std::string(c.name) + "_code", loom_status_name(s.code()));
    report(std::string(c.name) + "_ms", std::to_string(ms));
    // Finishing is allowed only with the right result: root 0's ones.
    const bool right = c.may_finish && !odd(*comm) && std::memcmp(x.data(), y.data(), 400) == 0;
    if (s.code() != LOOM_ERR_INVALID_ARGUMENT && !(s.is_ok() && right)) {
      report(std::string(c.name) + "_message", "\"" + s.message() + "\"");
      ++bad;
    }
    // Still usable: a correct allreduce right after.
    int32_t one = 1, total = 0;
    s = comm->allreduce(&one, &total, 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM);
    if (!s.is_ok() || total != comm->size()) {
      report(std::string(c.name) + "_after", "\"" + s.to_string() + " total " + std::to_string(total) + "\"");
      return 1;
    }
  }
  report("mismatches_missed", std::to_string(bad));
  return bad == 0 ? 0 : 1;
}

}  // namespace ucx_rank
