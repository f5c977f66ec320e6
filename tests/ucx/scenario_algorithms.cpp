// SPDX-License-Identifier: Apache-2.0
// scenario_algorithms.cpp: every operation checked exactly under option sets
// that force each algorithm (latency ones only, bandwidth ones with tiny
// chunks so pipelines run deep), in and out of place, at every root, plus
// operations in flight at once and communicators over subsets of the ranks
// alive beside the world one.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "rank_common.hpp"

namespace ucx_rank {
namespace {

bool is_unsigned(loom_dtype d) { return d == LOOM_DTYPE_U8; }

// Inputs of rank r at element i for op; small values, exact in every dtype.
double input(loom_reduce_op op, loom_dtype d, int r, size_t i) {
  switch (op) {
    case LOOM_REDUCE_PROD: return double((r + i) % 2 + 1);
    case LOOM_REDUCE_MIN:
    case LOOM_REDUCE_MAX: return double((size_t(r) * 7 + i) % 11) - (is_unsigned(d) ? 0 : 5);
    case LOOM_REDUCE_AVG: return double(i % 5);  // equal on every rank: the average is exact
    default: return double((size_t(r) + i) % 3);
  }
}

double expected(loom_reduce_op op, loom_dtype d, int n, size_t i) {
  double acc = input(op, d, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = input(op, d, r, i);
    if (op == LOOM_REDUCE_PROD) acc *= v;
    else if (op == LOOM_REDUCE_MIN) acc = v < acc ? v : acc;
    else if (op == LOOM_REDUCE_MAX) acc = v > acc ? v : acc;
    else acc += v;
  }
  return op == LOOM_REDUCE_AVG ? acc / n : acc;
}

struct Checker {
  std::string where;
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (ok || failures++ > 5) return;
    report("mismatch", "\"" + where + ": " + what + "\"");
  }
  void status(const loom::Status& s, const std::string& what) { expect(s.is_ok(), what + ": " + s.to_string()); }
};

using Buf = std::vector<char>;
Buf make(loom_dtype d, size_t n) { return Buf((n + 1) * loom_dtype_size(d), char(0x5a)); }

void check_values(Checker& ck, const std::string& what, loom_dtype d, const void* p, size_t n,
                  const std::function<double(size_t)>& want) {
  for (size_t i = 0; i < n; ++i) {
    Buf one(loom_dtype_size(d));
    store_value(d, one.data(), 0, want(i));
    if (std::memcmp(one.data(), static_cast<const char*>(p) + i * one.size(), one.size()) != 0) {
      ck.expect(false, what + " element " + std::to_string(i) + " = " + std::to_string(load_value(d, p, i)) +
                           ", expected " + std::to_string(want(i)));
      return;
    }
  }
}

void run_reductions(Checker& ck, loom::Communicator& c, loom_dtype d, size_t count) {
  const int n = c.size(), me = c.rank();
  const size_t el = loom_dtype_size(d);
  for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_PROD, LOOM_REDUCE_MIN, LOOM_REDUCE_MAX, LOOM_REDUCE_AVG}) {
    const std::string tag = std::to_string(d) + "/" + std::to_string(op) + "/" + std::to_string(count);
    auto mine = [&](size_t i) { return input(op, d, me, i); };
    for (bool in_place : {false, true}) {
      // allreduce
      Buf s = make(d, count), r = make(d, count);
      for (size_t i = 0; i < count; ++i) store_value(d, s.data(), i, mine(i));
      void* out = in_place ? s.data() : r.data();
      ck.status(c.allreduce(s.data(), out, count, d, op), "allreduce " + tag);
      check_values(ck, "allreduce " + tag, d, out, count, [&](size_t i) { return expected(op, d, n, i); });
      // reduce, every root
      for (int root = 0; root < n; ++root) {
        Buf s2 = make(d, count), r2 = make(d, count);
        for (size_t i = 0; i < count; ++i) store_value(d, s2.data(), i, mine(i));
        void* out2 = in_place ? s2.data() : r2.data();
        ck.status(c.reduce(s2.data(), out2, count, d, op, root), "reduce " + tag);
        if (me == root) check_values(ck, "reduce " + tag, d, out2, count, [&](size_t i) { return expected(op, d, n, i); });
        else if (!in_place) ck.expect(r2 == make(d, count), "reduce wrote a non-root's recv " + tag);
      }
      // reduce_scatter: block b of rank r's input is elements [b*count, (b+1)*count) of the full vector
      Buf s3 = make(d, count * size_t(n)), r3 = make(d, count);
      for (size_t i = 0; i < count * size_t(n); ++i) store_value(d, s3.data(), i, mine(i));
      void* out3 = in_place ? s3.data() + size_t(me) * count * el : r3.data();
      ck.status(c.reduce_scatter(s3.data(), out3, count, d, op), "reduce_scatter " + tag);
      check_values(ck, "reduce_scatter " + tag, d, out3, count,
                   [&](size_t i) { return expected(op, d, n, size_t(me) * count + i); });
    }
  }
  // allreduce_scaled (floating dtypes): the SUM inputs times 0.5, exact, so
  // a scale applied twice or not at all shows in every algorithm.
  if (d != LOOM_DTYPE_F16 && d != LOOM_DTYPE_BF16 && d != LOOM_DTYPE_F32 && d != LOOM_DTYPE_F64) return;
  for (bool in_place : {false, true}) {
    const std::string tag = std::to_string(d) + "/scaled/" + std::to_string(count);
    Buf s = make(d, count), r = make(d, count);
    for (size_t i = 0; i < count; ++i) store_value(d, s.data(), i, input(LOOM_REDUCE_SUM, d, me, i));
    void* out = in_place ? s.data() : r.data();
    ck.status(c.allreduce_scaled(s.data(), out, count, d, 0.5), "allreduce_scaled " + tag);
    check_values(ck, "allreduce_scaled " + tag, d, out, count,
                 [&](size_t i) { return 0.5 * expected(LOOM_REDUCE_SUM, d, n, i); });
  }
}

void run_movement(Checker& ck, loom::Communicator& c, loom_dtype d, size_t count) {
  const int n = c.size(), me = c.rank();
  const size_t el = loom_dtype_size(d);
  const std::string tag = std::to_string(d) + "/" + std::to_string(count);
  auto value = [&](int r, size_t i) { return double((size_t(r) * 5 + i) % 100); };
  for (bool in_place : {false, true}) {
    for (int root = 0; root < n; ++root) {
      Buf s = make(d, count), r = make(d, count);
      for (size_t i = 0; i < count; ++i) store_value(d, s.data(), i, me == root ? value(root, i) : 0.0);
      void* out = in_place ? s.data() : r.data();
      ck.status(c.broadcast(s.data(), out, count, d, root), "broadcast " + tag);
      check_values(ck, "broadcast " + tag, d, out, count, [&](size_t i) { return value(root, i); });
    }
    Buf g = make(d, count * size_t(n)), gs = make(d, count);
    for (size_t i = 0; i < count; ++i) store_value(d, (in_place ? g.data() + size_t(me) * count * el : gs.data()), i, value(me, i));
    const void* in = in_place ? g.data() + size_t(me) * count * el : gs.data();
    ck.status(c.allgather(in, g.data(), count, d), "allgather " + tag);
    check_values(ck, "allgather " + tag, d, g.data(), count * size_t(n),
                 [&](size_t j) { return value(int(j / count), j % count); });
    Buf a = make(d, count * size_t(n)), ar = make(d, count * size_t(n));
    for (size_t j = 0; j < count * size_t(n); ++j) store_value(d, a.data(), j, value(me, j) );
    void* aout = in_place ? a.data() : ar.data();
    ck.status(c.alltoall(a.data(), aout, count, d), "alltoall " + tag);
    check_values(ck, "alltoall " + tag, d, aout, count * size_t(n),
                 [&](size_t j) { return value(int(j / count), size_t(me) * count + j % count); });
  }
  ck.status(c.barrier(), "barrier");
}

// Three operations in flight at once, waited for in reverse order.
void run_concurrent(Checker& ck, loom::Communicator& c) {
  const int n = c.size();
  const size_t count = 100003;
  std::vector<float> s(count, float(c.rank() + 1)), r(count), b(count, float(c.rank() == 0 ? 7 : 0)),
      g(size_t(n) * 1000), gs(1000, float(c.rank()));
  loom::Request r1, r2, r3;
  ck.status(c.iallreduce(s.data(), r.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &r1), "post allreduce");
  ck.status(c.ibroadcast(b.data(), b.data(), count, LOOM_DTYPE_F32, 0, &r2), "post broadcast");
  ck.status(c.iallgather(gs.data(), g.data(), 1000, LOOM_DTYPE_F32, &r3), "post allgather");
  ck.status(r3.wait(), "wait allgather");
  ck.status(r2.wait(), "wait broadcast");
  ck.status(r1.wait(), "wait allreduce");
  ck.expect(r[count - 1] == float(n * (n + 1) / 2) && b[count - 1] == 7.0f && g[size_t(n) * 1000 - 1] == float(n - 1),
            "concurrent results");
}

// Vectors large enough (16 MiB) for the ring to write its sums around the
// cache, with every op that path has.
void run_large(Checker& ck, loom::Communicator& c) {
  const int n = c.size(), me = c.rank();
  for (loom_dtype d : {LOOM_DTYPE_F32, LOOM_DTYPE_F64}) {
    const size_t count = (size_t(16) << 20) / loom_dtype_size(d) + 3;
    for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_PROD, LOOM_REDUCE_MIN, LOOM_REDUCE_MAX}) {
      Buf s = make(d, count);
      for (size_t i = 0; i < count; ++i) store_value(d, s.data(), i, input(op, d, me, i));
      ck.status(c.allreduce(s.data(), s.data(), count, d, op), "large allreduce");
      check_values(ck, "large allreduce " + std::to_string(d) + "/" + std::to_string(op), d, s.data(), count,
                   [&](size_t i) { return expected(op, d, n, i); });
    }
  }
}

}  // namespace

int scenario_algorithms(Rank& rk) {
  const Args& a = rk.args();
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> sets = {
      {"defaults", {}},
      {"latency", {{"ring_threshold_bytes", "1000000000"}, {"tree_pipeline_threshold_bytes", "1000000000"}}},
      {"bandwidth",
       {{"ring_threshold_bytes", "0"}, {"tree_pipeline_threshold_bytes", "0"}, {"chunk_bytes", "256"},
        {"pipeline_depth", "2"}}},
      // Whole ring blocks by cross-memory attach for every size (fused read
      // and reduction in small pieces), large vectors included.
      {"cma_whole",
       {{"cma_whole_blocks", "true"},
        {"cma_threshold_bytes", "0"},
        {"chunk_bytes", "4096"},
        {"cma_only_oversubscribed", "false"}}},
  };
  int failures = 0;
  for (const auto& set : sets) {
    std::map<std::string, std::string> options = a.options;
    options.insert(set.second.begin(), set.second.end());
    auto collective = rk.open_with(options);
    loom::CommOptions o;
    o.rank = a.rank;
    o.size = a.size;
    o.timeout = std::chrono::milliseconds(a.timeout_ms);
    o.name = "algorithms-" + set.first;
    o.oob = store_oob(&rk.store(), o.name, a.rank, a.size);
    std::unique_ptr<loom::Communicator> world;
    Checker ck{set.first};
    ck.status(collective->create_comm(o, &world), "create");
    if (!world) return 1;
    for (size_t count : {size_t(1), size_t(7), size_t(1031)})
      for (loom_dtype d : {LOOM_DTYPE_F16, LOOM_DTYPE_BF16, LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I8, LOOM_DTYPE_U8,
                           LOOM_DTYPE_I32, LOOM_DTYPE_I64}) {
        if (count != 1031 && d != LOOM_DTYPE_F32 && d != LOOM_DTYPE_I8) continue;
        run_reductions(ck, *world, d, count);
        run_movement(ck, *world, d, count);
      }
    run_reductions(ck, *world, LOOM_DTYPE_F32, 70001);  // several default chunks
    run_movement(ck, *world, LOOM_DTYPE_I32, 70001);
    run_concurrent(ck, *world);
    if (set.first == "defaults" || set.first == "cma_whole") run_large(ck, *world);
    // Communicators over the even and the odd ranks, beside the world one.
    if (a.size >= 3) {
      const int color = a.rank % 2, sub_rank = a.rank / 2, sub_size = (a.size - color + 1) / 2;
      loom::CommOptions so = o;
      so.rank = sub_rank;
      so.size = sub_size;
      so.name = o.name + "-sub" + std::to_string(color);
      so.oob = store_oob(&rk.store(), so.name, sub_rank, sub_size);
      std::unique_ptr<loom::Communicator> sub;
      ck.status(collective->create_comm(so, &sub), "create sub");
      if (sub) {
        run_reductions(ck, *sub, LOOM_DTYPE_F32, 1031);
        run_concurrent(ck, *world);
        run_movement(ck, *sub, LOOM_DTYPE_I8, 70001);
      }
    }
    report("set_" + set.first, ck.failures ? "FAILED" : "ok");
    failures += ck.failures;
  }
  return failures ? 1 : 0;
}

}  // namespace ucx_rank
