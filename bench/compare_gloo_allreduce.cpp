// SPDX-License-Identifier: Apache-2.0
// compare_gloo_allreduce: LibTorch's c10d::ProcessGroupGloo allreduce swept
// over the sizes `loom bench collective` uses (f32 sum, out of place on the
// Loom side, in place here as c10d does), timed the same way: one validated
// run, warm-ups, a barrier outside the timed region, iterations chosen by
// size, the mean time over ranks. Run it under `loom launch -n N`; rank 0
// serves the TCPStore at MASTER_ADDR:MASTER_PORT.
//
//   compare_gloo_allreduce [--json FILE] [--max-bytes N]
#define USE_C10D_GLOO 1  // ProcessGroupGloo.hpp is empty without it
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "compare_gloo_allreduce: %s is not set (run it under loom launch)\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

void allreduce(c10d::ProcessGroupGloo& pg, torch::Tensor& t) {
  std::vector<torch::Tensor> v{t};
  pg.allreduce(v)->wait();
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  uint64_t max_bytes = uint64_t(64) << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--json")) json_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--max-bytes")) max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE"), port = env_int("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  c10d::TCPStoreOptions so;
  so.port = uint16_t(port);
  so.isServer = rank == 0;
  so.numWorkers = size_t(world);
  so.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>(addr ? addr : "127.0.0.1", so);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);

  std::string rows, json = "{\"plugin\": \"gloo\", \"op\": \"allreduce\", \"dtype\": \"f32\", \"ranks\": " +
                            std::to_string(world) + ", \"results\": [";
  bool all_valid = true;
  for (uint64_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
    const int64_t count = int64_t(std::max<uint64_t>(bytes / 4, 1));
    auto base = torch::arange(count, torch::kInt64).remainder(7).to(torch::kFloat32) + float(rank + 1);
    torch::Tensor t = base.clone();
    allreduce(*pg, t);  // validated, and the first warm-up
    auto expected = torch::arange(count, torch::kInt64).remainder(7).to(torch::kFloat32) * float(world) +
                    float(world * (world + 1) / 2);
    torch::Tensor ok = torch::tensor({t.equal(expected) ? 1.0f : 0.0f});
    std::vector<torch::Tensor> okv{ok};
    pg->allreduce(okv, c10d::AllreduceOptions{c10d::ReduceOp::MIN})->wait();
    const bool valid = ok.item<float>() == 1.0f;
    all_valid = all_valid && valid;
    const int iters = int(std::clamp<uint64_t>((uint64_t(512) << 20) / bytes, 5, 1000));
    for (int i = 0; i < 2; ++i) allreduce(*pg, t);
    pg->barrier()->wait();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) allreduce(*pg, t);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    torch::Tensor mean = torch::tensor({seconds}, torch::kFloat64);
    std::vector<torch::Tensor> mv{mean};
    allreduce(*pg, mean);
    seconds = mean.item<double>() / world;
    const double payload = double(count) * 4, algbw = payload / seconds / 1e9, busbw = algbw * 2.0 * (world - 1) / world;
    char row[256];
    std::snprintf(row, sizeof row, "%-10llu %-10lld %-12.2f %-12.3f %-12.3f %s\n",
                  static_cast<unsigned long long>(payload), static_cast<long long>(count), seconds * 1e6, algbw, busbw,
                  valid ? "ok" : "WRONG");
    rows += row;
    char entry[256];
    std::snprintf(entry, sizeof entry,
                  "%s{\"bytes\": %llu, \"count\": %lld, \"iters\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.6f, "
                  "\"busbw_gbps\": %.6f, \"valid\": %s}",
                  bytes == 8 ? "" : ", ", static_cast<unsigned long long>(payload), static_cast<long long>(count),
                  iters, seconds * 1e6, algbw, busbw, valid ? "true" : "false");
    json += entry;
  }
  json += "]}\n";
  if (rank == 0) {
    std::printf("# c10d::ProcessGroupGloo allreduce (LibTorch %d.%d), dtype f32, %d rank(s), in place; time is the mean "
                "over ranks\n%-10s %-10s %-12s %-12s %-12s %s\n%s",
                TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, world, "bytes", "count", "time_us", "algbw_GB/s", "busbw_GB/s", "check", rows.c_str());
    if (!json_path.empty()) std::ofstream(json_path) << json;
  }
  return all_valid ? 0 : 1;
}
