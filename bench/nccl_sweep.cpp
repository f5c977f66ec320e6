// SPDX-License-Identifier: Apache-2.0
// loom_bench_nccl: the nccl collective's allreduce on this rank's GPU, in
// place, f32 sum, from 4 KiB to --max-mib, against the device-to-device
// copy bandwidth of the same buffer size measured in the same run (issue
// 14's benchmark). One GPU gives one rank (NCCL refuses two ranks of a
// communicator on one device); on several, start it under
// `loom launch -n N`. Prints one row per size: time per allreduce, its
// algorithm bandwidth (bytes / time), NCCL's bus bandwidth (x 2(n-1)/n),
// the copy bandwidth (bytes / time of dst.copy_(src)) and allreduce / copy.
// Exit 2 without a CUDA device or without the nccl plugin, saying why.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "loom/collective.hpp"
#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"
#include "loom/status.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  int64_t max_mib = 1024, iters = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--max-mib" || a == "--iters") && i + 1 < argc) {
      const long long v = std::atoll(argv[++i]);
      if (v <= 0) {
        std::fprintf(stderr, "loom_bench_nccl: %s wants a positive integer\n", a.c_str());
        return 2;
      }
      (a == "--max-mib" ? max_mib : iters) = v;
    } else {
      std::fprintf(stderr, "usage: loom_bench_nccl [--max-mib N (1024)] [--iters N (20)]\n");
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "loom_bench_nccl: no CUDA device here (this LibTorch %s CUDA)\n",
                 at::globalContext().hasCUDA() ? "has" : "was built without");
    return 2;
  }
  try {
    const loom::JobInfo job = loom::JobInfo::from_environment();
    const int device = job.local_rank > 0 ? job.local_rank : 0;
    loom::HostConfig config;
    config.search_path = loom::plugin_search_path({}, {});
    loom::Host host(std::move(config), job);
    auto nccl = host.open_collective("nccl");  // exit 2 with the reason when unavailable
    loom::CommOptions options;
    options.rank = job.rank;
    options.size = job.world_size;
    options.name = "bench-nccl";
    options.device_type = LOOM_DEVICE_CUDA;
    options.device_id = device;
    std::unique_ptr<loom::Communicator> comm;
    loom::check(nccl->create_comm(options, &comm), "creating the nccl communicator");
    const auto on_gpu = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device);
    if (job.rank == 0) {
      std::printf("# nccl allreduce (f32 sum, in place) on %d rank(s), against a device-to-device copy on cuda:%d; "
                  "%lld iterations each\n",
                  job.world_size, device, static_cast<long long>(iters));
      std::printf("%12s %12s %12s %12s %12s %10s\n", "bytes", "allreduce_us", "algbw_GB/s", "busbw_GB/s",
                  "copy_GB/s", "ar/copy");
    }
    for (int64_t bytes = 4096; bytes <= max_mib * (int64_t(1) << 20); bytes *= 4) {
      const int64_t n = bytes / 4;
      torch::Tensor buf = torch::ones({n}, on_gpu), src = torch::ones({n}, on_gpu), dst = torch::empty({n}, on_gpu);
      torch::cuda::synchronize(device);
      for (int w = 0; w < 3; ++w) loom::check(comm->allreduce(buf.data_ptr(), buf.data_ptr(), n, LOOM_DTYPE_F32, LOOM_REDUCE_SUM), "allreduce");
      auto t0 = Clock::now();
      for (int64_t i = 0; i < iters; ++i)
        loom::check(comm->allreduce(buf.data_ptr(), buf.data_ptr(), n, LOOM_DTYPE_F32, LOOM_REDUCE_SUM), "allreduce");
      const double ar = seconds_since(t0) / double(iters);  // each blocking allreduce waited for its end
      dst.copy_(src);
      torch::cuda::synchronize(device);
      t0 = Clock::now();
      for (int64_t i = 0; i < iters; ++i) dst.copy_(src);
      torch::cuda::synchronize(device);
      const double copy = seconds_since(t0) / double(iters);
      const double algbw = double(bytes) / ar / 1e9;
      const double busbw = algbw * (job.world_size > 1 ? 2.0 * (job.world_size - 1) / job.world_size : 1.0);
      const double copybw = double(bytes) / copy / 1e9;
      if (job.rank == 0)
        std::printf("%12lld %12.1f %12.2f %12.2f %12.2f %10.3f\n", static_cast<long long>(bytes), ar * 1e6, algbw,
                    busbw, copybw, algbw / copybw);
    }
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom_bench_nccl: %s\n", e.what());
    return e.exit_code();
  }
}
