// SPDX-License-Identifier: Apache-2.0
// loom_ddp_device_sim: the ddp strategy's device path (SDK ABI 1.6) on a
// machine without a GPU. Run under mpirun -np 2.
//
// It lends ddp a training state on {kDLCUDA, 0} with a stream, whose tensors
// and alloc_device blocks are host arrays this program calls device memory;
// ddp runs over the devsim collective (devsim_collective.cpp), which refuses
// every other buffer, as nccl refuses host memory. So the checks below fail
// if ddp hands the collective one host pointer, copies the wrong way, or
// leaks device memory: setup gives every rank rank 0's parameters (tensor by
// tensor); gradients are averaged in one range and, when scattered, member
// by member; metrics, decisions and bytes (more than ddp's scratch) travel
// through device memory; old or service-less hosts are refused clearly.
// Exit code 0 when every check passed on every rank.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../core/src/host_services.hpp"
#include "../../core/src/plugin_loader.hpp"
#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"
#include "loom/strategy.h"

namespace {

int g_rank = 0, g_failures = 0, g_checks = 0;

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

// ---- "Device memory": host ranges this program registers -------------------

std::mutex g_mutex;
std::map<const unsigned char *, size_t> g_device;  // start -> bytes
int g_live_blocks = 0;                              // alloc_device blocks not given back
int g_wrong_copies = 0;                             // copies whose flags lied about a side

// By address (an integer): GCC takes a const void * argument for a read of
// the fresh, uninitialised block.
void add_device(uintptr_t p, size_t n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_device.insert_or_assign(reinterpret_cast<const unsigned char *>(p), n);
}

bool device_range(const void *p, size_t n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto *q = static_cast<const unsigned char *>(p);
  auto it = g_device.upper_bound(q);
  if (it == g_device.begin()) return false;
  --it;
  return q >= it->first && q + n <= it->first + it->second;
}

}  // namespace

// Asked by the devsim collective for every buffer it is given.
extern "C" __attribute__((visibility("default"))) int loom_devsim_is_device(const void *p, size_t n) {
  return device_range(p, n) ? 1 : 0;
}

namespace {

loom_status alloc_device(void *, size_t bytes, void **ptr) {
  *ptr = nullptr;
  if (bytes == 0) return LOOM_OK;
  void *p = std::malloc(bytes);
  if (p == nullptr) return LOOM_ERR_SYSTEM;
  add_device(reinterpret_cast<uintptr_t>(p), bytes);
  *ptr = p;
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_live_blocks;
  return LOOM_OK;
}

void free_device(void *, void *ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_device.erase(static_cast<unsigned char *>(ptr));
    --g_live_blocks;
  }
  std::free(ptr);
}

loom_status copy(void *, void *dst, int32_t dst_on_device, const void *src, int32_t src_on_device, size_t bytes) {
  if (device_range(dst, bytes) != (dst_on_device != 0) || device_range(src, bytes) != (src_on_device != 0)) {
    std::lock_guard<std::mutex> lock(g_mutex);
    ++g_wrong_copies;
  }
  std::memcpy(dst, src, bytes);
  return LOOM_OK;
}

// ---- A model of three parameters, f32 and f64, on the "device" -------------

struct Model {
  std::vector<std::vector<int64_t>> shapes{{4, 3}, {5}, {7}};
  std::vector<DLDataType> dtypes{{kDLFloat, 32, 1}, {kDLFloat, 32, 1}, {kDLFloat, 64, 1}};
  std::vector<std::vector<double>> param_store, grad_store;  // f64 storage, viewed as f32 where needed
  std::vector<DLTensor> params, grads;
  loom_training_state_v1 state{};

  // scattered: each gradient in its own allocation (no bucket is one range).
  explicit Model(bool scattered) {
    const size_t n = shapes.size();
    param_store.resize(n);
    params.resize(n);
    grads.resize(n);
    // Gradients of one dtype back to back in one arena unless scattered.
    grad_store.resize(n + 1);
    size_t f32_total = 0;
    for (size_t i = 0; i < n; ++i)
      if (dtypes[i].bits == 32) f32_total += numel(i);
    grad_store[n].assign(f32_total, 0);  // the f32 arena (as doubles: room to spare)
    size_t f32_at = 0;
    for (size_t i = 0; i < n; ++i) {
      param_store[i].assign(numel(i), 0);
      params[i] = view(param_store[i].data(), i);
      if (dtypes[i].bits == 32 && !scattered) {
        grads[i] = view(reinterpret_cast<float *>(grad_store[n].data()) + f32_at, i);
        f32_at += numel(i);
      } else {
        grad_store[i].assign(numel(i), 0);
        grads[i] = view(grad_store[i].data(), i);
      }
    }
    for (auto &v : param_store) add_device(reinterpret_cast<uintptr_t>(v.data()), v.size() * sizeof(double));
    for (auto &v : grad_store)
      if (!v.empty()) add_device(reinterpret_cast<uintptr_t>(v.data()), v.size() * sizeof(double));
    state.struct_size = sizeof state;
    state.num_params = static_cast<uint32_t>(n);
    state.params = params.data();
    state.grads = grads.data();
    state.batch_size = 8;
    state.max_steps = -1;
    state.device = DLDevice{kDLCUDA, 0};
    state.stream = reinterpret_cast<void *>(0x1);  // cudaStreamLegacy
    state.alloc_device = alloc_device;
    state.free_device = free_device;
    state.copy = copy;
  }
  size_t numel(size_t i) const {
    size_t k = 1;
    for (int64_t e : shapes[i]) k *= size_t(e);
    return k;
  }
  DLTensor view(void *data, size_t i) {
    DLTensor t{};
    t.data = data;
    t.device = DLDevice{kDLCUDA, 0};
    t.ndim = static_cast<int32_t>(shapes[i].size());
    t.dtype = dtypes[i];
    t.shape = shapes[i].data();
    return t;
  }
  double get(const DLTensor &t, size_t j) const {
    return t.dtype.bits == 32 ? static_cast<const float *>(t.data)[j] : static_cast<const double *>(t.data)[j];
  }
  void put(const DLTensor &t, size_t j, double v) {
    if (t.dtype.bits == 32) static_cast<float *>(t.data)[j] = float(v);
    else static_cast<double *>(t.data)[j] = v;
  }
};

// ---- The strategy, loaded as the trainer loads it ---------------------------

loom::Host *g_host = nullptr;

struct Strategy {
  const loom_strategy_v1 *vt = nullptr;
  std::unique_ptr<loom::PluginHostContext> services;
  loom_strategy_ctx *ctx = nullptr;
  std::string error() const { return vt->last_error(ctx); }
  ~Strategy() {
    if (ctx) vt->fini(ctx);
  }
};

std::unique_ptr<Strategy> open_ddp() {
  const loom::PluginCandidate *candidate = g_host->find(LOOM_KIND_STRATEGY, "ddp");
  if (!candidate) throw std::runtime_error("no libddp_strategy.so in the plugin path");
  loom::LoadedPlugin plugin;
  std::string reason;
  if (!loom::load_plugin(*candidate, &plugin, &reason)) throw std::runtime_error(candidate->path + ": " + reason);
  auto s = std::make_unique<Strategy>();
  s->vt = static_cast<const loom_strategy_v1 *>(plugin.vtable);
  const loom::JobInfo &job = g_host->job();
  s->services = loom::make_host_context(g_host, *candidate, plugin.descriptor,
                                        {{"collective", "devsim"}, {"bucket_mb", "25"}}, job.rank, job.world_size,
                                        job.local_rank);
  char why[1024] = "";
  const loom_status st = s->vt->init(&s->services->table, &s->ctx, why, sizeof why);
  if (st != LOOM_OK) throw std::runtime_error(std::string("ddp init: ") + why);
  return s;
}

bool contains(const std::string &text, const char *part) { return text.find(part) != std::string::npos; }

// One training step's worth of the device path.
void case_train(bool scattered) {
  const char *label = scattered ? "scattered gradients" : "gradients in one range";
  Model m(scattered);
  for (size_t i = 0; i < m.params.size(); ++i)
    for (size_t j = 0; j < m.numel(i); ++j) {
      m.put(m.params[i], j, g_rank * 100.0 + i * 10.0 + j);
      m.put(m.grads[i], j, (g_rank + 1) * (j + 1.0));
    }
  auto s = open_ddp();
  loom_status st = s->vt->setup(s->ctx, &m.state);
  CHECK(st == LOOM_OK, "%s: setup: %s: %s", label, loom_status_name(st), s->error().c_str());
  if (st != LOOM_OK) return;
  const std::string line = s->vt->status_line(s->ctx);
  for (size_t i = 0; i < m.params.size(); ++i)
    for (size_t j = 0; j < m.numel(i); ++j)
      CHECK(m.get(m.params[i], j) == i * 10.0 + j, "%s: parameter %zu[%zu] is %g, not rank 0's", label, i, j,
            m.get(m.params[i], j));
  loom_step_decision decision = LOOM_STEP_ACCUMULATE;
  st = s->vt->after_backward(s->ctx, 8, &decision);
  CHECK(st == LOOM_OK && decision == LOOM_STEP_APPLY, "%s: after_backward: %s: %s", label, loom_status_name(st),
        s->error().c_str());
  for (size_t i = 0; i < m.grads.size(); ++i)
    for (size_t j = 0; j < m.numel(i); ++j)
      CHECK(m.get(m.grads[i], j) == 1.5 * (j + 1.0), "%s: gradient %zu[%zu] is %g, not the mean %g", label, i, j,
            m.get(m.grads[i], j), 1.5 * (j + 1.0));
  double mean = g_rank + 1.0;
  st = s->vt->reduce_metric(s->ctx, &mean, LOOM_METRIC_MEAN);
  CHECK(st == LOOM_OK && mean == 1.5, "%s: reduce_metric mean: %s, %g", label, loom_status_name(st), mean);
  int32_t all = g_rank == 0 ? 1 : 0, any = all;
  st = s->vt->reduce_decision(s->ctx, &all, 1);
  CHECK(st == LOOM_OK && all == 0, "%s: reduce_decision all: %s, %d", label, loom_status_name(st), all);
  st = s->vt->reduce_decision(s->ctx, &any, 0);
  CHECK(st == LOOM_OK && any == 1, "%s: reduce_decision any: %s, %d", label, loom_status_name(st), any);
  std::vector<unsigned char> bytes(600);  // more than ddp's device scratch
  for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<unsigned char>(j * 7 + g_rank);
  st = s->vt->broadcast_bytes(s->ctx, bytes.data(), bytes.size(), 1);
  bool from_root = st == LOOM_OK;
  for (size_t j = 0; j < bytes.size() && from_root; ++j) from_root = bytes[j] == static_cast<unsigned char>(j * 7 + 1);
  CHECK(from_root, "%s: broadcast_bytes from rank 1: %s: %s", label, loom_status_name(st), s->error().c_str());
  CHECK(s->vt->barrier(s->ctx) == LOOM_OK, "%s: barrier: %s", label, s->error().c_str());
  st = s->vt->teardown(s->ctx);
  CHECK(st == LOOM_OK, "%s: teardown: %s", label, s->error().c_str());
  CHECK(g_live_blocks == 0, "%s: %d device block(s) not given back", label, g_live_blocks);
  CHECK(g_wrong_copies == 0, "%s: %d copies named the wrong side", label, g_wrong_copies);
  if (g_rank == 0) std::printf("  device path, %s: %s\n", label, line.c_str());
}

// Hosts that cannot lend what the device path needs are refused, clearly.
void case_refusals() {
  {  // a 1.5 host: no device field, so CUDA tensors are not where it says
    Model m(false);
    m.state.struct_size = LOOM_TRAINING_STATE_V1_5_SIZE;
    auto s = open_ddp();
    const loom_status st = s->vt->setup(s->ctx, &m.state);
    CHECK(st == LOOM_ERR_INVALID_ARGUMENT && contains(s->error(), "lives on cuda:0, not on the training state's device cpu"),
          "1.5 host: %s: %s", loom_status_name(st), s->error().c_str());
  }
  {  // a 1.6 host on a device without the memory services
    Model m(false);
    m.state.alloc_device = nullptr;
    auto s = open_ddp();
    const loom_status st = s->vt->setup(s->ctx, &m.state);
    CHECK(st == LOOM_ERR_UNSUPPORTED && contains(s->error(), "no alloc_device, free_device and copy services"),
          "no services: %s: %s", loom_status_name(st), s->error().c_str());
  }
  {  // host memory over a device-only collective: its refusal, named
    Model m(false);
    m.state.device = DLDevice{kDLCPU, 0};
    m.state.stream = nullptr;
    for (auto *list : {&m.params, &m.grads})
      for (DLTensor &t : *list) t.device = DLDevice{kDLCPU, 0};
    auto s = open_ddp();
    const loom_status st = s->vt->setup(s->ctx, &m.state);
    CHECK(st == LOOM_ERR_UNSUPPORTED && contains(s->error(), "buffers in host memory") &&
              contains(s->error(), "communicators are for CUDA memory only"),
          "host memory: %s: %s", loom_status_name(st), s->error().c_str());
  }
  if (g_rank == 0) std::printf("  refusals: a 1.5 host, no memory services, host memory over devsim\n");
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DEVSIM_PLUGIN_DIR (under mpirun -np 2)\n", argv[0]);
    return 2;
  }
  try {
    loom::HostConfig config;
    config.search_path = loom::plugin_search_path({argv[1]}, {});
    const loom::JobInfo job = loom::JobInfo::from_environment();
    g_rank = job.rank;
    if (job.world_size != 2) {
      std::fprintf(stderr, "run under mpirun -np 2 (world size is %d)\n", job.world_size);
      return 2;
    }
    loom::Host host(std::move(config), job);
    g_host = &host;
    // Keeps MPI initialised between strategy instances, and gathers the verdict.
    auto keeper = host.open_collective("mpi");
    std::unique_ptr<loom::Communicator> comm;
    loom::CommOptions options;
    options.rank = job.rank;
    options.size = job.world_size;
    options.name = "device-sim";
    loom::check(keeper->create_comm(options, &comm), "the program's own communicator");
    if (g_rank == 0) std::printf("loom_ddp_device_sim: ddp on {kDLCUDA, 0} over devsim, 2 ranks\n");
    case_train(false);
    comm->barrier();
    case_train(true);
    comm->barrier();
    case_refusals();
    comm->barrier();
    int32_t failures = g_failures, checks = g_checks;
    loom::check(comm->allreduce(&failures, &failures, 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM), "verdict");
    loom::check(comm->allreduce(&checks, &checks, 1, LOOM_DTYPE_I32, LOOM_REDUCE_SUM), "verdict");
    if (g_rank == 0) std::printf("%s: %d checks on 2 ranks, %d failed\n", failures ? "FAILED" : "PASSED", checks, failures);
    comm.reset();
    keeper.reset();
    return failures ? 1 : 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", g_rank, e.what());
    return 1;
  }
}
