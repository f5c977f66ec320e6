// SPDX-License-Identifier: Apache-2.0
// scenario_back_to_back.cpp: many non-blocking operations of mixed kinds
// posted back to back on one communicator before any is waited for (two
// and three broadcasts from the same root in a row, small and pipelined
// sizes, every other collective, point to point between them), then waited
// for in an order that differs across ranks. Every result is checked
// exactly: a message matched to the wrong operation shows up as another
// operation's values. Runs under the default options and under options that
// force the latency and the pipelined algorithms, and with every message or
// none by cross-memory attach.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rank_common.hpp"

namespace ucx_rank {
namespace {

// One posted operation: its request, its buffers (borrowed by the plugin
// until it ends) and how to check its result ("" when right, else the first
// wrong element).
struct Posted {
  std::string what;
  std::vector<std::shared_ptr<void>> buffers;
  loom::Request request;
  std::function<std::string()> check;
};

std::string wrong(size_t i, double got, double want) {
  return "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " + std::to_string(want);
}

// Values unique to (operation, round, rank, element), exact in f32 and i32.
float value(int op, int round, int rank, size_t i) {
  return float((op * 131 + round * 17 + rank * 7 + int(i % 1000)) % 4093);
}

class Round {
 public:
  Round(loom::Communicator& c, int round) : c_(c), round_(round), n_(c.size()), me_(c.rank()) {}

  // Posts every operation, back to back.
  void post() {
    const size_t small = 5, large = 40000;  // 20 B: staged; 160 KB: pipelined in chunks
    bcast(0, small);
    bcast(0, small);  // same root, same size, right behind the first
    bcast(0, large);
    bcast(0, large);
    bcast(n_ - 1, small);
    allreduce(small, LOOM_REDUCE_SUM);
    p2p(3);
    allreduce(300001, LOOM_REDUCE_SUM);  // ring
    bcast(0, small);
    reduce(1 % n_, 1000);
    allgather(777);
    p2p(20000);
    reduce_scatter(5000);
    alltoall(333);
    barrier();
    allreduce(3, LOOM_REDUCE_MAX);
    bcast(n_ > 1 ? 1 : 0, large);
    bcast(0, small);
  }

  // Waits for them all, in an order that depends on the rank, and checks.
  int finish() {
    const size_t k = ops_.size();
    for (size_t j = 0; j < k; ++j) {
      // Rank 0 forward, rank 1 backward, others from the middle.
      const size_t idx = me_ == 0 ? j : me_ == 1 ? k - 1 - j : (j + k / 2) % k;
      Posted& p = *ops_[idx];
      const loom::Status s = p.request.wait();
      if (!s.is_ok()) fail(p.what + ": " + s.to_string());
      else if (const std::string why = p.check(); !why.empty()) fail(p.what + ": " + why);
    }
    return failures_;
  }

 private:
  using F = std::vector<float>;

  Posted& add(const std::string& what) {
    ops_.push_back(std::make_unique<Posted>());
    ops_.back()->what = "round " + std::to_string(round_) + " op " + std::to_string(ops_.size() - 1) + " " + what;
    return *ops_.back();
  }
  void fail(const std::string& why) {
    if (failures_++ < 8) report("back_to_back_mismatch", "\"" + why + "\"");
  }
  void posted(const loom::Status& s, Posted& p) {
    if (!s.is_ok()) fail(p.what + " (post): " + s.to_string());
  }
  int id() const { return int(ops_.size()); }

  void bcast(int root, size_t count) {
    const int op = id();
    auto buf = std::make_shared<F>(count, -1.0f);
    if (me_ == root)
      for (size_t i = 0; i < count; ++i) (*buf)[i] = value(op, round_, root, i);
    Posted& p = add("broadcast of " + std::to_string(count) + " from " + std::to_string(root));
    p.buffers = {buf};
    p.check = [=, r = round_] {
      for (size_t i = 0; i < count; ++i)
        if ((*buf)[i] != value(op, r, root, i)) return wrong(i, (*buf)[i], value(op, r, root, i));
      return std::string();
    };
    posted(c_.ibroadcast(buf->data(), buf->data(), count, LOOM_DTYPE_F32, root, &p.request), p);
  }

  void allreduce(size_t count, loom_reduce_op rop) {
    const int op = id(), n = n_, me = me_;
    auto in = std::make_shared<F>(count), out = std::make_shared<F>(count, -1.0f);
    for (size_t i = 0; i < count; ++i) (*in)[i] = value(op, round_, me_, i);
    Posted& p = add("allreduce of " + std::to_string(count));
    p.buffers = {in, out};
    p.check = [=, r = round_] {
      for (size_t i = 0; i < count; ++i) {
        float want = value(op, r, 0, i);
        for (int k = 1; k < n; ++k) {
          const float v = value(op, r, k, i);
          want = rop == LOOM_REDUCE_MAX ? (v > want ? v : want) : want + v;
        }
        if ((*out)[i] != want) return wrong(i, (*out)[i], want);
      }
      // Out of place: the input stays untouched.
      return (*in)[0] == value(op, r, me, 0) ? std::string() : std::string("the input changed");
    };
    posted(c_.iallreduce(in->data(), out->data(), count, LOOM_DTYPE_F32, rop, &p.request), p);
  }

  void reduce(int root, size_t count) {
    const int op = id(), n = n_, me = me_;
    auto in = std::make_shared<std::vector<int32_t>>(count), out = std::make_shared<std::vector<int32_t>>(count, -1);
    for (size_t i = 0; i < count; ++i) (*in)[i] = int32_t(value(op, round_, me_, i));
    Posted& p = add("reduce of " + std::to_string(count) + " to " + std::to_string(root));
    p.buffers = {in, out};
    p.check = [=, r = round_] {
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int k = 0; k < n; ++k) want += int32_t(value(op, r, k, i));
        if ((*out)[i] != (me == root ? want : -1)) return wrong(i, (*out)[i], me == root ? want : -1);
      }
      return std::string();
    };
    posted(c_.ireduce(in->data(), out->data(), count, LOOM_DTYPE_I32, LOOM_REDUCE_SUM, root, &p.request), p);
  }

  void allgather(size_t count) {
    const int op = id(), n = n_;
    auto in = std::make_shared<F>(count), out = std::make_shared<F>(count * size_t(n), -1.0f);
    for (size_t i = 0; i < count; ++i) (*in)[i] = value(op, round_, me_, i);
    Posted& p = add("allgather of " + std::to_string(count));
    p.buffers = {in, out};
    p.check = [=, r = round_] {
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < count; ++i)
          if ((*out)[size_t(k) * count + i] != value(op, r, k, i))
            return wrong(size_t(k) * count + i, (*out)[size_t(k) * count + i], value(op, r, k, i));
      return std::string();
    };
    posted(c_.iallgather(in->data(), out->data(), count, LOOM_DTYPE_F32, &p.request), p);
  }

  void reduce_scatter(size_t count) {
    const int op = id(), n = n_, me = me_;
    auto in = std::make_shared<F>(count * size_t(n)), out = std::make_shared<F>(count, -1.0f);
    for (size_t i = 0; i < in->size(); ++i) (*in)[i] = value(op, round_, me_, i);
    Posted& p = add("reduce_scatter of " + std::to_string(count));
    p.buffers = {in, out};
    p.check = [=, r = round_] {
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int k = 0; k < n; ++k) want += value(op, r, k, size_t(me) * count + i);
        if ((*out)[i] != want) return wrong(i, (*out)[i], want);
      }
      return std::string();
    };
    posted(c_.ireduce_scatter(in->data(), out->data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &p.request), p);
  }

  void alltoall(size_t count) {
    const int op = id(), n = n_, me = me_;
    auto in = std::make_shared<F>(count * size_t(n)), out = std::make_shared<F>(count * size_t(n), -1.0f);
    for (size_t i = 0; i < in->size(); ++i) (*in)[i] = value(op, round_, me_, i);
    Posted& p = add("alltoall of " + std::to_string(count));
    p.buffers = {in, out};
    p.check = [=, r = round_] {
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < count; ++i)
          if ((*out)[size_t(k) * count + i] != value(op, r, k, size_t(me) * count + i))
            return wrong(size_t(k) * count + i, (*out)[size_t(k) * count + i], value(op, r, k, size_t(me) * count + i));
      return std::string();
    };
    posted(c_.ialltoall(in->data(), out->data(), count, LOOM_DTYPE_F32, &p.request), p);
  }

  void barrier() {
    Posted& p = add("barrier");
    p.check = [] { return std::string(); };
    posted(c_.ibarrier(&p.request), p);
  }

  // To the right neighbour and from the left one, two messages of `count`
  // in a row (their order must hold whatever their size).
  void p2p(size_t count) {
    if (n_ < 2) return;
    const int right = (me_ + 1) % n_, left = (me_ + n_ - 1) % n_;
    for (int m = 0; m < 2; ++m) {
      const int op = id();
      auto out = std::make_shared<F>(count);
      for (size_t i = 0; i < count; ++i) (*out)[i] = value(op, round_, me_, i);
      Posted& s = add("send of " + std::to_string(count) + " to " + std::to_string(right));
      s.buffers = {out};
      s.check = [] { return std::string(); };
      posted(c_.isend(out->data(), count, LOOM_DTYPE_F32, right, &s.request), s);
      // The left neighbour posted the same sequence, so its send has this id.
      auto in = std::make_shared<F>(count, -1.0f);
      Posted& r = add("recv of " + std::to_string(count) + " from " + std::to_string(left));
      r.buffers = {in};
      r.check = [=, rd = round_] {
        for (size_t i = 0; i < count; ++i)
          if ((*in)[i] != value(op, rd, left, i)) return wrong(i, (*in)[i], value(op, rd, left, i));
        return std::string();
      };
      posted(c_.irecv(in->data(), count, LOOM_DTYPE_F32, left, &r.request), r);
    }
  }

  loom::Communicator& c_;
  int round_, n_, me_;
  int failures_ = 0;
  std::vector<std::unique_ptr<Posted>> ops_;
};

}  // namespace

int scenario_back_to_back(Rank& rk) {
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> sets = {
      {"defaults", {}},
      {"latency", {{"ring_threshold_bytes", "1000000000"}, {"tree_pipeline_threshold_bytes", "1000000000"}}},
      {"bandwidth",
       {{"ring_threshold_bytes", "0"}, {"tree_pipeline_threshold_bytes", "0"}, {"chunk_bytes", "4096"},
        {"pipeline_depth", "2"}}},
      // Every message, headers included, by cross-memory attach, and none.
      {"cma_always", {{"cma_threshold_bytes", "0"}, {"cma_only_oversubscribed", "false"}}},
      {"cma_never", {{"cma_threshold_bytes", "-1"}}},
      // Whole ring blocks by cross-memory attach (fused read and reduction).
      {"cma_whole", {{"cma_whole_blocks", "true"}, {"cma_only_oversubscribed", "false"}}},
  };
  int failures = 0;
  for (const auto& set : sets) {
    std::unique_ptr<loom::Communicator> comm;
    const loom::Status s = rk.make_comm_with(set.second, "back-to-back-" + set.first, &comm);
    if (!s.is_ok()) {
      report("back_to_back_mismatch", "\"create: " + s.to_string() + "\"");
      return 1;
    }
    int set_failures = 0;
    for (int round = 0; round < 3; ++round) {
      Round r(*comm, round);
      r.post();
      set_failures += r.finish();
    }
    report("set_" + set.first, set_failures ? "FAILED" : "ok");
    failures += set_failures;
  }
  return failures ? 1 : 0;
}

}  // namespace ucx_rank
