// SPDX-License-Identifier: Apache-2.0
// loom_ddp_harness: drives libddp_strategy.so the way the trainer will, with
// plain arrays as parameters and gradients, until `loom train` exists.
//
//   mpirun --oversubscribe --allow-run-as-root -np 4 [-x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500]
//       loom_ddp_harness [--bench] [--collective NAME] [--probe-dir DIR]
//
// The strategy is loaded with the core's own loader and host table
// (load_plugin + make_host_context, as the trainer will), so its open_plugin
// reaches the real mpi plugin. Each case prints one line on rank 0; failed
// checks print on the rank that saw them. Exit code 0 when every check on
// every rank passed, 1 otherwise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../core/src/host_services.hpp"
#include "../../core/src/plugin_loader.hpp"
#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"
#include "loom/strategy.h"
#include "fake_model.hpp"

namespace {

int g_rank = 0, g_size = 1;
std::string g_collective = "mpi";  // --collective: what the strategy averages over
int g_checks = 0, g_failures = 0;

#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    ++g_checks;                                                                      \
    if (!(cond)) {                                                                   \
      ++g_failures;                                                                  \
      std::fprintf(stderr, "[rank %d] FAIL line %d: %s: ", g_rank, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fputc('\n', stderr);                                                      \
    }                                                                                \
  } while (0)

// Rank 0 prints.
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char *fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

using namespace ddp_fake;  // the fake models (fake_model.hpp)

// ---- The strategy, loaded as the trainer will ----

struct Strategy {
  const loom_strategy_v1 *vt = nullptr;
  std::unique_ptr<loom::PluginHostContext> services;
  loom_strategy_ctx *ctx = nullptr;
  loom_status init_status = LOOM_OK;
  std::string why;
  bool set_up = false;

  std::string error() const { return vt->last_error(ctx); }
  loom_status setup(const loom_training_state_v1 *state) {
    loom_status s = vt->setup(ctx, state);
    set_up = s == LOOM_OK;
    return s;
  }
  ~Strategy() {
    if (!ctx) return;
    if (set_up && vt->teardown(ctx) != LOOM_OK)
      std::fprintf(stderr, "[rank %d] teardown failed: %s\n", g_rank, error().c_str());
    vt->fini(ctx);
  }
};

loom::Host *g_host = nullptr;

std::unique_ptr<Strategy> open_strategy(std::map<std::string, std::string> options) {
  options.emplace("collective", g_collective);  // unless the case names one
  const loom::PluginCandidate *candidate = g_host->find(LOOM_KIND_STRATEGY, "ddp");
  if (!candidate) throw std::runtime_error("no libddp_strategy.so in the plugin path");
  loom::LoadedPlugin plugin;
  std::string reason;
  if (!loom::load_plugin(*candidate, &plugin, &reason)) throw std::runtime_error(candidate->path + ": " + reason);
  auto s = std::make_unique<Strategy>();
  s->vt = static_cast<const loom_strategy_v1 *>(plugin.vtable);
  const loom::JobInfo &job = g_host->job();
  s->services =
      loom::make_host_context(g_host, *candidate, plugin.descriptor, options, job.rank, job.world_size, job.local_rank);
  char why[1024] = "";
  s->init_status = s->vt->init(&s->services->table, &s->ctx, why, sizeof why);
  s->why = why;
  return s;
}

// An initialised and set-up strategy or nullptr (after a failed check).
std::unique_ptr<Strategy> ready(const std::map<std::string, std::string> &options, Model &m) {
  auto s = open_strategy(options);
  CHECK(s->init_status == LOOM_OK, "init: %s", s->why.c_str());
  if (s->init_status != LOOM_OK) return nullptr;
  const loom_status st = s->setup(&m.state);
  CHECK(st == LOOM_OK, "setup: %s: %s", loom_status_name(st), s->error().c_str());
  return st == LOOM_OK ? std::move(s) : nullptr;
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

int bucket_count(Strategy &s) {  // from "ddp over mpi, 4 ranks, 3 buckets (...)"
  const std::string line = s.vt->status_line(s.ctx);
  const size_t comma = line.rfind(", ");
  return comma == std::string::npos ? -1 : std::atoi(line.c_str() + comma + 2);
}

// ---- Cases ----

// After setup every rank holds rank 0's parameters, bit for bit.
void case_broadcast(const char *bucket_mb, bool flat) {
  auto m = make_model(mixed_specs(), flat);
  fill_params(*m, g_rank);
  auto s = ready({{"bucket_mb", bucket_mb}}, *m);
  if (!s) return;
  uint64_t wrong = 0, total = 0;
  for (size_t i = 0; i < m->size(); ++i) {
    for (uint64_t j = 0; j < m->numel(i); ++j, ++total)
      wrong += get(m->params[i], m->specs[i].dtype, j) != param_value(m->specs[i].dtype, i, j, 0);
  }
  CHECK(wrong == 0, "%llu of %llu parameter elements differ from rank 0's", (unsigned long long)wrong,
        (unsigned long long)total);
  say("  broadcast   bucket_mb=%-7s %s grads: %d buckets, %llu elements equal to rank 0's%s\n", bucket_mb,
      flat ? "flat    " : "separate", bucket_count(*s), (unsigned long long)total, wrong ? " (FAILED)" : "");
}

// Gradients that differ per rank come back as their mean; returns them
// (steps x elements, as doubles) for comparison across bucket sizes.
std::vector<double> case_average(const char *bucket_mb, bool flat, int steps) {
  auto m = make_model(mixed_specs(), flat);
  fill_params(*m, g_rank);
  m->state.start_step = 41;
  auto s = ready({{"bucket_mb", bucket_mb}}, *m);
  std::vector<double> out;
  if (!s) return out;
  CHECK(s->vt->global_step(s->ctx) == 41, "global_step %lld after setup", (long long)s->vt->global_step(s->ctx));
  uint64_t exact = 0, total = 0;
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    fill_grads(*m, g_rank, step);
    loom_step_decision decision = -1;
    const loom_status st = s->vt->after_backward(s->ctx, 8, &decision);
    CHECK(st == LOOM_OK, "after_backward: %s", s->error().c_str());
    CHECK(decision == LOOM_STEP_APPLY, "decision %d", decision);
    for (size_t i = 0; i < m->size(); ++i) {
      const loom_dtype d = m->specs[i].dtype;
      // One unit in the last place of each dtype: the mean of exact sums is
      // exact when the size is a power of two, else rounded once.
      const double ulp = d == LOOM_DTYPE_F64   ? 0x1p-52
                         : d == LOOM_DTYPE_F32 ? 0x1p-23
                         : d == LOOM_DTYPE_F16 ? 0x1p-10
                                               : 0x1p-7;
      for (uint64_t j = 0; j < m->numel(i); ++j, ++total) {
        double sum = 0;
        for (int r = 0; r < g_size; ++r) sum += grad_value(d, i, j, r, step);
        const double want = rounded(d, sum / g_size), got = get(m->grads[i], d, j);
        out.push_back(got);
        exact += got == want;
        const double err = std::fabs(got - want) / std::max(std::fabs(want), 1e-30);
        worst = std::max(worst, got == want ? 0.0 : err);
        CHECK(std::fabs(got - want) <= ulp * std::fabs(want), "step %d param %zu [%llu]: got %.17g, mean is %.17g",
              step, i, (unsigned long long)j, got, want);
      }
    }
    CHECK(s->vt->after_optimizer_step(s->ctx) == LOOM_OK, "after_optimizer_step: %s", s->error().c_str());
  }
  CHECK(s->vt->global_step(s->ctx) == 41 + steps, "global_step %lld", (long long)s->vt->global_step(s->ctx));
  say("  average     bucket_mb=%-7s %s grads: %d buckets, %d steps, %llu/%llu elements exactly the mean, worst "
      "relative error %.2g\n",
      bucket_mb, flat ? "flat    " : "separate", bucket_count(*s), steps, (unsigned long long)exact,
      (unsigned long long)total, worst);
  return out;
}

// A small MLP (33 -> 16 tanh -> 4) trained with SGD: DDP with per-rank batch
// B must match one process with batch N*B on the same samples.
struct Mlp {
  static constexpr int D = 33, H = 16, O = 4;
  static std::vector<Spec> specs() {
    std::vector<Spec> s(4);
    s[0].shape = {H, D};
    s[1].shape = {H};
    s[2].shape = {O, H};
    s[3].shape = {O};
    return s;
  }
  static float input(int64_t sample, int k) { return float(int(mix(sample, k, 3) % 2001) - 1000) / 1000.f; }
  static float target(int64_t sample, int o) {
    float v = 0;
    for (int k = 0; k < D; ++k) v += std::sin(float(k + 3 * o)) * input(sample, k);
    return std::tanh(v);
  }
  // Mean-squared-error gradients over samples [first, first + count) into g.
  static void grads(const std::vector<float *> &p, const std::vector<float *> &g, int64_t first, int count) {
    for (int i = 0; i < 4; ++i) std::fill(g[i], g[i] + (i == 0 ? H * D : i == 1 ? H : i == 2 ? O * H : O), 0.f);
    for (int n = 0; n < count; ++n) {
      const int64_t sample = first + n;
      float x[D], h[H], o[O], dout[O], dh[H];
      for (int k = 0; k < D; ++k) x[k] = input(sample, k);
      for (int u = 0; u < H; ++u) {
        float z = p[1][u];
        for (int k = 0; k < D; ++k) z += p[0][u * D + k] * x[k];
        h[u] = std::tanh(z);
      }
      for (int v = 0; v < O; ++v) {
        float z = p[3][v];
        for (int u = 0; u < H; ++u) z += p[2][v * H + u] * h[u];
        o[v] = z;
        dout[v] = (o[v] - target(sample, v)) / float(count);
      }
      for (int u = 0; u < H; ++u) {
        float a = 0;
        for (int v = 0; v < O; ++v) a += p[2][v * H + u] * dout[v];
        dh[u] = a * (1 - h[u] * h[u]);
      }
      for (int v = 0; v < O; ++v) {
        g[3][v] += dout[v];
        for (int u = 0; u < H; ++u) g[2][v * H + u] += dout[v] * h[u];
      }
      for (int u = 0; u < H; ++u) {
        g[1][u] += dh[u];
        for (int k = 0; k < D; ++k) g[0][u * D + k] += dh[u] * x[k];
      }
    }
  }
};

void case_sgd_equivalence(const char *bucket_mb, int steps, int batch) {
  const float lr = 0.1f;
  auto ddp = make_model(Mlp::specs(), false), single = make_model(Mlp::specs(), false);
  fill_params(*ddp, g_rank);  // differs per rank until setup's broadcast
  for (size_t i = 0; i < ddp->size(); ++i)
    for (uint64_t j = 0; j < ddp->numel(i); ++j)
      put(ddp->params[i], LOOM_DTYPE_F32, j, 0.25 * param_value(LOOM_DTYPE_F32, i, j, g_rank) / 6.0);
  for (size_t i = 0; i < single->size(); ++i)
    for (uint64_t j = 0; j < single->numel(i); ++j)
      put(single->params[i], LOOM_DTYPE_F32, j, 0.25 * param_value(LOOM_DTYPE_F32, i, j, 0) / 6.0);
  auto s = ready({{"bucket_mb", bucket_mb}}, *ddp);
  if (!s) return;
  int32_t shard = -1, shards = -1;
  CHECK(s->vt->data_shard(s->ctx, &shard, &shards) == LOOM_OK, "data_shard: %s", s->error().c_str());
  auto floats = [](Model &m, std::vector<DLTensor> &t) {
    std::vector<float *> v;
    for (size_t i = 0; i < m.size(); ++i)
      v.push_back(reinterpret_cast<float *>(static_cast<unsigned char *>(t[i].data) + t[i].byte_offset));
    return v;
  };
  auto dp = floats(*ddp, ddp->params), dg = floats(*ddp, ddp->grads);
  auto sp = floats(*single, single->params), sg = floats(*single, single->grads);
  for (int step = 0; step < steps; ++step) {
    const int64_t global_first = int64_t(step) * shards * batch;
    Mlp::grads(dp, dg, global_first + int64_t(shard) * batch, batch);
    loom_step_decision decision = 0;
    CHECK(s->vt->after_backward(s->ctx, uint64_t(batch), &decision) == LOOM_OK, "after_backward: %s",
          s->error().c_str());
    for (size_t i = 0; i < ddp->size(); ++i)
      for (uint64_t j = 0; j < ddp->numel(i); ++j) dp[i][j] -= lr * dg[i][j];
    CHECK(s->vt->after_optimizer_step(s->ctx) == LOOM_OK, "after_optimizer_step: %s", s->error().c_str());
    Mlp::grads(sp, sg, global_first, shards * batch);
    for (size_t i = 0; i < single->size(); ++i)
      for (uint64_t j = 0; j < single->numel(i); ++j) sp[i][j] -= lr * sg[i][j];
  }
  double worst_elem = 0, worst_norm = 0, moved = 0;
  uint64_t not_close = 0;  // torch.allclose(ddp, single, rtol=1e-5, atol=1e-8) per element
  for (size_t i = 0; i < ddp->size(); ++i) {
    double diff_inf = 0, ref_inf = 0;
    for (uint64_t j = 0; j < ddp->numel(i); ++j) {
      const double a = dp[i][j], b = sp[i][j];
      diff_inf = std::max(diff_inf, std::fabs(a - b));
      ref_inf = std::max(ref_inf, std::fabs(b));
      worst_elem = std::max(worst_elem, std::fabs(a - b) / std::max(std::fabs(b), 1e-3));
      not_close += std::fabs(a - b) > 1e-8 + 1e-5 * std::fabs(b);
      moved = std::max(moved, std::fabs(b - 0.25 * param_value(LOOM_DTYPE_F32, i, j, 0) / 6.0));
    }
    worst_norm = std::max(worst_norm, diff_inf / ref_inf);
  }
  CHECK(worst_norm <= 1e-5, "parameters after %d steps differ from batch %d by %.3g relative", steps, shards * batch,
        worst_norm);
  CHECK(s->vt->global_step(s->ctx) == steps, "global_step %lld", (long long)s->vt->global_step(s->ctx));
  say("  sgd         bucket_mb=%-7s %d ranks x batch %d vs 1 x batch %d, %d steps: max |diff|/max|ref| per tensor "
      "%.2g, per element %.2g; %llu elements outside allclose(rtol 1e-5, atol 1e-8) (parameters moved up to %.3g)\n",
      bucket_mb, shards, batch, shards * batch, steps, worst_norm, worst_elem, (unsigned long long)not_close, moved);
}

void case_small_collectives() {
  auto m = make_model(Mlp::specs(), false);
  fill_params(*m, 0);
  m->state.start_step = 7;
  auto s = ready({}, *m);
  if (!s) return;
  const loom_strategy_v1 &v = *s->vt;
  const double n = g_size;
  struct {
    loom_metric_op op;
    double want;
  } metrics[] = {
      {LOOM_METRIC_SUM, n * (n + 1) / 2}, {LOOM_METRIC_MEAN, (n + 1) / 2}, {LOOM_METRIC_MIN, 1}, {LOOM_METRIC_MAX, n}};
  for (auto &c : metrics) {
    double value = g_rank + 1;
    CHECK(v.reduce_metric(s->ctx, &value, c.op) == LOOM_OK, "reduce_metric: %s", s->error().c_str());
    CHECK(value == c.want, "reduce_metric op %d gave %g, want %g", c.op, value, c.want);
  }
  double odd = 0.1 * (g_rank + 1);
  CHECK(v.reduce_metric(s->ctx, &odd, LOOM_METRIC_MEAN) == LOOM_OK, "reduce_metric: %s", s->error().c_str());
  double want_odd = 0;
  for (int r = 0; r < g_size; ++r) want_odd += 0.1 * (r + 1);
  CHECK(std::fabs(odd - want_odd / g_size) < 1e-15, "mean %.17g want %.17g", odd, want_odd / g_size);
  CHECK(v.reduce_metric(s->ctx, &odd, 99) == LOOM_ERR_INVALID_ARGUMENT, "unknown metric op accepted");

  struct {
    int32_t mine, all, want;
  } decisions[] = {{g_rank == 0 ? 1 : 0, 1, g_size == 1 ? 1 : 0},
                   {g_rank == 0 ? 1 : 0, 0, 1},
                   {5, 1, 1},  // any non-zero counts as true
                   {0, 0, 0},
                   {g_rank == g_size - 1 ? 0 : -3, 1, g_size == 1 ? 0 : 0}};
  for (auto &c : decisions) {
    int32_t d = c.mine;
    CHECK(v.reduce_decision(s->ctx, &d, c.all) == LOOM_OK, "reduce_decision: %s", s->error().c_str());
    CHECK(d == c.want, "reduce_decision(%d, all=%d) gave %d, want %d", c.mine, c.all, d, c.want);
  }

  CHECK(v.barrier(s->ctx) == LOOM_OK, "barrier: %s", s->error().c_str());
  const int root = g_size - 1;
  std::vector<unsigned char> bytes((1 << 20) + 3);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (unsigned char)(g_rank == root ? i * 7 + 1 : 0xee);
  CHECK(v.broadcast_bytes(s->ctx, bytes.data(), bytes.size(), root) == LOOM_OK, "broadcast_bytes: %s",
        s->error().c_str());
  size_t bad = 0;
  for (size_t i = 0; i < bytes.size(); ++i) bad += bytes[i] != (unsigned char)(i * 7 + 1);
  CHECK(bad == 0, "%zu of %zu broadcast bytes wrong", bad, bytes.size());
  CHECK(v.broadcast_bytes(s->ctx, nullptr, 0, 0) == LOOM_OK, "empty broadcast_bytes: %s", s->error().c_str());
  const loom_status bad_root = v.broadcast_bytes(s->ctx, bytes.data(), 4, g_size);
  CHECK(bad_root == LOOM_ERR_INVALID_ARGUMENT && contains(s->error(), "root"), "bad root: %s %s",
        loom_status_name(bad_root), s->error().c_str());

  int32_t shard = -1, shards = -1;
  CHECK(v.data_shard(s->ctx, &shard, &shards) == LOOM_OK && shard == g_rank && shards == g_size, "data_shard %d of %d",
        shard, shards);
  CHECK(v.is_global_zero(s->ctx) == (g_rank == 0 ? 1 : 0), "is_global_zero");
  CHECK(v.should_stop(s->ctx) == 0, "should_stop");
  CHECK(v.global_step(s->ctx) == 7, "global_step %lld", (long long)v.global_step(s->ctx));
  CHECK(v.after_optimizer_step(s->ctx) == LOOM_OK && v.global_step(s->ctx) == 8, "global_step after a step");
  const std::string line = v.status_line(s->ctx);
  CHECK(contains(line, "ddp over " + g_collective + ", " + std::to_string(g_size) + " rank"), "status_line '%s'",
        line.c_str());
  say("  small ops   reduce_metric sum/mean/min/max, reduce_decision all/any, barrier, broadcast_bytes of %zu bytes "
      "from rank %d, data_shard, global_step; status_line: \"%s\"\n",
      bytes.size(), root, line.c_str());
}

// Failures that every rank detects locally, before any communication.
void case_local_errors() {
  {
    auto s = open_strategy({{"bucket_mb", "-1"}});
    CHECK(s->init_status == LOOM_ERR_INVALID_ARGUMENT && contains(s->why, "bucket_mb"), "bucket_mb=-1: %s %s",
          loom_status_name(s->init_status), s->why.c_str());
    say("  init        bucket_mb=-1 -> %s: %s\n", loom_status_name(s->init_status), s->why.c_str());
    s->ctx = nullptr;
  }
  {
    auto s = open_strategy({{"timeout_ms", "0"}});
    CHECK(s->init_status == LOOM_ERR_INVALID_ARGUMENT && contains(s->why, "timeout_ms"), "timeout_ms=0: %s",
          s->why.c_str());
  }
  auto expect_setup = [](const char *name, std::vector<Spec> specs, loom_status want, const char *words,
                         std::function<void(Model &)> tweak = nullptr) {
    auto m = make_model(specs, false);
    if (tweak) tweak(*m);
    auto s = open_strategy({});
    if (s->init_status != LOOM_OK) {
      CHECK(false, "init: %s", s->why.c_str());
      return;
    }
    const loom_status st = s->setup(&m->state);
    const std::string error = s->error();
    CHECK(st == want && contains(error, words), "%s: setup gave %s: %s", name, loom_status_name(st), error.c_str());
    say("  setup       %-22s -> %s: %s\n", name, loom_status_name(st), error.c_str());
  };
  std::vector<Spec> cuda = Mlp::specs();
  cuda[2].device = kDLCUDA;
  expect_setup("CUDA parameter", cuda, LOOM_ERR_UNSUPPORTED, "CPU");
  std::vector<Spec> ints = Mlp::specs();
  ints[1].raw = {kDLInt, 32, 1};
  expect_setup("i32 parameter", ints, LOOM_ERR_UNSUPPORTED, "dtype");
  std::vector<Spec> strided = Mlp::specs();
  strided[0].strides = {1, Mlp::H};  // column-major
  expect_setup("non-contiguous", strided, LOOM_ERR_INVALID_ARGUMENT, "contiguous");
  expect_setup("gradient shape", Mlp::specs(), LOOM_ERR_INVALID_ARGUMENT, "does not match", [](Model &m) {
    m.shapes.push_back({Mlp::O - 1});  // the gradient is one element short
    m.grads[3].shape = m.shapes.back().data();
  });
}

void case_unknown_collective() {
  auto m = make_model(Mlp::specs(), false);
  auto s = open_strategy({{"collective", "nosuch"}});
  CHECK(s->init_status == LOOM_OK, "init: %s", s->why.c_str());
  const loom_status st = s->setup(&m->state);
  const std::string error = s->error();
  CHECK(st == LOOM_ERR_UNAVAILABLE && contains(error, "'nosuch'"), "setup: %s %s", loom_status_name(st), error.c_str());
  say("  setup       collective=nosuch       -> %s: %s\n", loom_status_name(st), error.c_str());
  // Calls before setup, and a teardown that has nothing to do.
  double value = 1;
  CHECK(s->vt->reduce_metric(s->ctx, &value, LOOM_METRIC_SUM) == LOOM_ERR_INVALID_ARGUMENT &&
            contains(s->error(), "before setup"),
        "reduce_metric before setup: %s", s->error().c_str());
  CHECK(s->vt->teardown(s->ctx) == LOOM_OK, "teardown without setup");
}

// Failures that only show when the ranks compare notes.
void case_disagreement() {
  std::vector<Spec> specs = Mlp::specs();
  if (g_rank == 1) specs.push_back(Spec{LOOM_DTYPE_F32, {2}, {}, 0, kDLCPU, {}});
  auto m = make_model(specs, false);
  auto s = open_strategy({});
  loom_status st = s->setup(&m->state);
  CHECK(st == LOOM_ERR_INVALID_ARGUMENT && contains(s->error(), "number of parameter tensors"), "extra tensor: %s %s",
        loom_status_name(st), s->error().c_str());
  say("  setup       rank 1 has one more tensor -> %s: %s\n", loom_status_name(st), s->error().c_str());

  auto m2 = make_model(Mlp::specs(), false);
  auto s2 = open_strategy({{"bucket_mb", g_rank == 0 ? "25" : "1"}});
  st = s2->setup(&m2->state);
  CHECK(st == LOOM_ERR_INVALID_ARGUMENT && contains(s2->error(), "bucket_mb"), "bucket_mb differs: %s %s",
        loom_status_name(st), s2->error().c_str());
  say("  setup       bucket_mb differs         -> %s: %s\n", loom_status_name(st), s2->error().c_str());
}

// Rank 0 averages alone: its wait times out, the message names the bucket and
// the collective, the group stays failed, and teardown still works.
void case_timeout() {
  auto m = make_model(mixed_specs(), false);
  auto s = ready({{"timeout_ms", "1500"}, {"bucket_mb", "0.001"}}, *m);
  if (!s) return;
  if (g_rank == 0) {
    fill_grads(*m, 0, 0);
    loom_step_decision decision = -1;
    const auto t0 = std::chrono::steady_clock::now();
    const loom_status st = s->vt->after_backward(s->ctx, 8, &decision);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string error = s->error();
    CHECK(st == LOOM_ERR_TIMEOUT && contains(error, "gradient bucket 1 of") &&
              contains(error, "collective '" + g_collective + "'"),
          "after_backward alone: %s %s", loom_status_name(st), error.c_str());
    CHECK(secs >= 1.4 && secs < 5, "timed out after %.2f s", secs);
    say("  timeout     rank 0 alone, timeout_ms=1500: %s after %.2f s: %s\n", loom_status_name(st), secs,
        error.c_str());
    const loom_status again = s->vt->barrier(s->ctx);
    CHECK(again == LOOM_ERR_TIMEOUT && contains(s->error(), "unusable since an earlier failure"), "later call: %s %s",
          loom_status_name(again), s->error().c_str());
    say("  timeout     next call: %s: %.120s...\n", loom_status_name(again), s->error().c_str());
    say("  timeout     status_line: \"%s\"\n", s->vt->status_line(s->ctx));
  }
  CHECK(s->vt->teardown(s->ctx) == LOOM_OK, "teardown after failure: %s", s->error().c_str());
  s->set_up = false;
}

// The oob allgather over the host store, through a collective that checks it.
void case_oob(bool have_store) {
  auto m = make_model(Mlp::specs(), false);
  auto s = open_strategy({{"collective", "oobprobe"}});
  const loom_status st = s->setup(&m->state);
  const std::string error = s->error();
  if (have_store)
    CHECK(st == LOOM_ERR_UNAVAILABLE && contains(error, "allgather verified over " + std::to_string(g_size)),
          "oob: %s %s", loom_status_name(st), error.c_str());
  else
    CHECK(st == LOOM_ERR_UNAVAILABLE && contains(error, "rendezvous store"), "oob: %s %s", loom_status_name(st),
          error.c_str());
  say("  oob         %s store: %s\n", have_store ? "with a" : "without a", error.c_str());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// after_backward on ~10 M f32 parameters (20 tensors), against one raw
// in-place allreduce of the same bytes on the mpi plugin.
void bench(loom::Communicator &raw) {
  std::vector<Spec> specs(20);
  for (auto &s : specs) s.shape = {512, 1024};
  const size_t elems = 20 * 512 * 1024;
  auto time_ms = [](const std::function<void()> &fn) {
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      if (i >= 2) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(t);
  };
  std::vector<float> flat(elems, 1.f);
  const double raw_ms =
      time_ms([&] { raw.allreduce(flat.data(), flat.data(), elems, LOOM_DTYPE_F32, LOOM_REDUCE_AVG); });
  say("  bench       %zu f32 (%.0f MiB), %d ranks, median of 10: raw mpi allreduce %.1f ms\n", elems,
      elems * 4.0 / (1 << 20), g_size, raw_ms);
  for (auto [mb, flat_grads] :
       {std::pair<const char *, bool>{"25", false}, {"25", true}, {"1000", false}, {"1", false}}) {
    auto m = make_model(specs, flat_grads);
    auto s = ready({{"bucket_mb", mb}}, *m);
    if (!s) return;
    const double ms = time_ms([&] {
      loom_step_decision d;
      s->vt->after_backward(s->ctx, 8, &d);
    });
    say("  bench       after_backward bucket_mb=%-5s %s grads, %2d buckets: %.1f ms (%.2fx raw)\n", mb,
        flat_grads ? "flat    " : "separate", bucket_count(*s), ms, ms / raw_ms);
  }
}

}  // namespace

int main(int argc, char **argv) {
  bool run_bench = false;
  std::vector<std::string> plugin_paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bench") {
      run_bench = true;
    } else if (a == "--collective" && i + 1 < argc) {
      g_collective = argv[++i];
    } else if (a == "--probe-dir" && i + 1 < argc) {
      plugin_paths.push_back(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--bench] [--collective NAME] [--probe-dir DIR]\n", argv[0]);
      return 2;
    }
  }
#ifdef LOOM_DDP_PROBE_DIR
  if (plugin_paths.empty()) plugin_paths.push_back(LOOM_DDP_PROBE_DIR);
#endif
  try {
    loom::HostConfig config;
    config.search_path = loom::plugin_search_path(plugin_paths, {});
    loom::JobInfo job = loom::JobInfo::from_environment();
    g_rank = job.rank;
    g_size = job.world_size;
    const bool have_store = !job.master_addr.empty() || job.world_size == 1;
    loom::Host host(std::move(config), job);
    g_host = &host;
    // The harness's own mpi instance: it keeps MPI initialised between the
    // strategy instances (the last instance to close finalizes MPI) and
    // gathers the verdict.
    auto keeper = host.open_collective("mpi");
    std::unique_ptr<loom::Communicator> comm;
    loom::CommOptions options;
    options.rank = job.rank;
    options.size = job.world_size;
    options.name = "harness";
    loom::check(keeper->create_comm(options, &comm), "harness communicator");
    say("loom_ddp_harness: %d rank(s), launcher %s, store %s, ddp over '%s'\n", g_size, job.launcher.c_str(),
        have_store ? "yes" : "no", g_collective.c_str());

    case_broadcast("25", false);
    case_broadcast("0.001", false);
    case_broadcast("0.001", true);
    comm->barrier();
    const auto reference = case_average("1000", false, 3);
    for (auto [mb, flat] : {std::pair<const char *, bool>{"25", false},
                            {"0.004", false},
                            {"0.0001", false},
                            {"0.0001", true},
                            {"25", true}}) {
      const auto other = case_average(mb, flat, 3);
      CHECK(other == reference, "bucket_mb=%s %s: averaged gradients differ from one bucket per dtype", mb,
            flat ? "flat" : "separate");
    }
    say("  buckets     every bucket size and layout above gave bit-identical averages\n");
    comm->barrier();
    case_sgd_equivalence("25", 20, 8);
    case_sgd_equivalence("0.0001", 20, 8);
    comm->barrier();
    case_small_collectives();
    comm->barrier();
    case_local_errors();
    case_unknown_collective();
    if (g_size > 1) case_disagreement();
    if (!plugin_paths.empty() && host.find(LOOM_KIND_COLLECTIVE, "oobprobe")) case_oob(have_store);
    comm->barrier();
    if (run_bench) bench(*comm);
    comm->barrier();
    if (g_size > 1) {
      case_timeout();
      comm->barrier();
      // A fresh instance still works after the failed one.
      case_average("25", false, 1);
    }
    int32_t failures = g_failures, checks = g_checks;
    loom::check(comm->allreduce(&failures, &failures, 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM), "verdict");
    loom::check(comm->allreduce(&checks, &checks, 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM), "verdict");
    say("%s: %d checks on %d rank(s), %d failed\n", failures ? "FAILED" : "PASSED", checks, g_size, failures);
    comm.reset();
    keeper.reset();
    return failures ? 1 : 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "[rank %d] harness error: %s\n", g_rank, e.what());
    return 1;
  }
}
