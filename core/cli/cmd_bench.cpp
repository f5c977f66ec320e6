// SPDX-License-Identifier: Apache-2.0
// `loom bench collective`: an nccl-tests style sweep of one collective
// plugin, run under a launcher (mpirun, loom launch). Sizes in powers of two,
// warm-ups not timed, a barrier outside the timed region, one validated
// iteration per size; algbw = bytes / time, busbw = algbw times the op's
// factor (allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include "huge_pages.h"
#include "commands.hpp"
#include "loom/collective.hpp"
#include "table.hpp"

namespace loom::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string plugin;
  std::string op = "allreduce";
  std::string json_path;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ull << 20;
  int iters = 0;  // 0: chosen per size
  int warmup = 2;
  bool huge_pages = false;  // buffers in transparent huge pages, as Loom's gradient buffers are
};

using Floats = std::vector<float, loom_plugin_common::HugePageAllocator<float>>;

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter") return double(n - 1) / n;
  return 1.0;  // broadcast
}

// Posts one op of `bytes` total payload (nccl-tests' size) with f32 elements.
Status run_op(Communicator& comm, const std::string& op, Floats& send, Floats& recv, uint64_t count) {
  const uint64_t n = static_cast<uint64_t>(comm.size());
  if (op == "allreduce") return comm.allreduce(send.data(), recv.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
  if (op == "broadcast") return comm.broadcast(send.data(), recv.data(), count, LOOM_DTYPE_F32, 0);
  if (op == "allgather") return comm.allgather(send.data(), recv.data(), count / n, LOOM_DTYPE_F32);
  return comm.reduce_scatter(send.data(), recv.data(), count / n, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
}

// Checks recv after one run with send[i] = rank + 1 + (i % 7) on every rank.
bool valid_result(const std::string& op, const Floats& recv, uint64_t count, int rank, int n) {
  for (uint64_t i = 0; i < count; ++i) {
    float expected;
    if (op == "allreduce") {
      expected = float(n * (n + 1) / 2 + n * int(i % 7));
    } else if (op == "broadcast") {
      expected = float(1 + i % 7);
    } else if (op == "allgather") {
      uint64_t block = count / n, src = i / block, j = i % block;
      expected = float(src + 1 + j % 7);
    } else {
      if (i >= count / n) break;
      uint64_t j = uint64_t(rank) * (count / n) + i;
      expected = float(n * (n + 1) / 2 + n * int(j % 7));
    }
    if (recv[i] != expected) return false;
  }
  (void)rank;
  return true;
}

int bench_collective(const GlobalOptions& global, const BenchArgs& args) {
  auto host = make_host(global);
  auto collective = host->open_collective(args.plugin);
  const JobInfo& job = host->job();
  CommOptions options;
  options.rank = job.rank;
  options.size = job.world_size;
  options.timeout = std::chrono::seconds(120);
  options.name = "bench";
  std::unique_ptr<Communicator> comm;
  check(collective->create_comm(options, &comm), "creating the benchmark communicator");
  const int n = comm->size(), rank = comm->rank();

  Table table({"bytes", "count", "time_us", "algbw_GB/s", "busbw_GB/s", "check"});
  json results = json::array();
  bool all_valid = true;
  for (uint64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
    uint64_t count = std::max<uint64_t>(bytes / sizeof(float), 1);
    if (args.op == "allgather" || args.op == "reduce_scatter") count = std::max<uint64_t>(count / n * n, n);
    const loom_plugin_common::HugePageAllocator<float> alloc(args.huge_pages);
    Floats send(count, 0.0f, alloc), recv(count, -1.0f, alloc);
    for (uint64_t i = 0; i < count; ++i) send[i] = float(rank + 1 + int(i % 7));
    if (args.op == "allgather") {  // each rank contributes its block
      for (uint64_t i = 0; i < count / n; ++i) send[i] = float(rank + 1 + int(i % 7));
    }
    // One validated run (also the first warm-up).
    check(run_op(*comm, args.op, send, recv, count), args.op + " of " + std::to_string(bytes) + " bytes");
    bool valid = valid_result(args.op, recv, count, rank, n);
    int32_t ok_here = valid ? 1 : 0, ok_all = 0;
    check(comm->allreduce(&ok_here, &ok_all, 1, LOOM_DTYPE_I32, LOOM_REDUCE_MIN), "validation allreduce");
    all_valid = all_valid && ok_all == 1;

    int iters = args.iters > 0 ? args.iters : int(std::clamp<uint64_t>((512ull << 20) / bytes, 5, 1000));
    for (int i = 0; i < args.warmup; ++i) check(run_op(*comm, args.op, send, recv, count), "warm-up");
    check(comm->barrier(), "barrier");
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) check(run_op(*comm, args.op, send, recv, count), args.op);
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    double avg_seconds = 0;
    check(comm->allreduce(&seconds, &avg_seconds, 1, LOOM_DTYPE_F64, LOOM_REDUCE_AVG), "timing allreduce");

    double payload = double(count * sizeof(float));
    double algbw = payload / avg_seconds / 1e9;
    double busbw = algbw * bus_factor(args.op, n);
    char t[32], a[32], b[32];
    std::snprintf(t, sizeof t, "%.2f", avg_seconds * 1e6);
    std::snprintf(a, sizeof a, "%.3f", algbw);
    std::snprintf(b, sizeof b, "%.3f", busbw);
    table.add({std::to_string(uint64_t(payload)), std::to_string(count), t, a, b, ok_all ? "ok" : "WRONG"});
    results.push_back({{"bytes", uint64_t(payload)}, {"count", count}, {"iters", iters}, {"time_us", avg_seconds * 1e6},
                       {"algbw_gbps", algbw}, {"busbw_gbps", busbw}, {"valid", ok_all == 1}});
  }
  if (rank == 0) {
    std::cout << "# loom bench collective: plugin " << args.plugin << " " << collective->descriptor().version << ", op "
              << args.op << ", dtype f32, " << n << " rank(s), out of place; time is the mean over ranks\n";
    table.print(std::cout);
    if (!args.json_path.empty()) {
      std::ofstream out(args.json_path);
      out << json{{"plugin", args.plugin}, {"version", collective->descriptor().version}, {"op", args.op},
                  {"dtype", "f32"}, {"ranks", n}, {"huge_pages", args.huge_pages}, {"results", results}}
                 .dump(2)
          << "\n";
      if (!out) throw Error::runtime("cannot write " + args.json_path);
    }
  }
  if (!all_valid) throw Error::runtime("some results were wrong (see the check column)");
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, const GlobalOptions& global, Runner* run) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* coll = bench->add_subcommand("collective", "Sweep one collective plugin over message sizes (run it under a launcher)");
  coll->add_option("--plugin", args->plugin, "Collective plugin name")->required();
  coll->add_option("--op", args->op, "Operation")->check(CLI::IsMember({"allreduce", "broadcast", "allgather", "reduce_scatter"}));
  coll->add_option("--json", args->json_path, "Also write the results as JSON to this file");
  coll->add_option("--min-bytes", args->min_bytes, "Smallest size")->check(CLI::Range(uint64_t(4), uint64_t(1) << 34));
  coll->add_option("--max-bytes", args->max_bytes, "Largest size")->check(CLI::Range(uint64_t(4), uint64_t(1) << 34));
  coll->add_option("--iters", args->iters, "Timed iterations per size (0: by size)")->check(CLI::Range(0, 1000000));
  coll->add_option("--warmup", args->warmup, "Untimed iterations per size")->check(CLI::Range(0, 1000));
  coll->add_flag("--huge-pages", args->huge_pages,
                 "Allocate the buffers in transparent huge pages (madvise), as Loom's gradient buffers are");
  coll->callback([args, &global, run] {
    if (args->min_bytes > args->max_bytes) throw CLI::ValidationError("--min-bytes", "must not exceed --max-bytes");
    *run = [args, &global] { return bench_collective(global, *args); };
  });
}

}  // namespace loom::cli
