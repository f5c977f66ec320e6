// What the plugin boundary costs: a one-float allreduce through
// libmpi_collective.so (post + wait through the C vtable), with its default
// non-blocking path (MPI_Iallreduce, so waits can time out) and with its
// `blocking = true` option (MPI_Allreduce inside the post), against
// MPI_Allreduce and MPI_Iallreduce + MPI_Wait called directly, in the same
// process and run. Rounds alternate between the paths so drift in machine
// load hits all of them alike; the median round of each is reported.
//
//   mpirun --oversubscribe --allow-run-as-root -np 2 build/bin/loom_bench_boundary [iters] [rounds]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loom/host.hpp"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double time_per_op_us(int iters, F&& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  double max_us = 0;  // the slowest rank defines the collective's time
  MPI_Allreduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max_us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  try {
    loom::HostConfig config;
    config.search_path = loom::plugin_search_path({}, {});
    loom::Host host(config, loom::JobInfo::from_environment());
    auto mpi = host.open_collective("mpi");  // initialises MPI in this process
    config.options[{LOOM_KIND_COLLECTIVE, "mpi"}]["blocking"] = "true";
    loom::Host blocking_host(config, loom::JobInfo::from_environment());
    auto mpi_blocking = blocking_host.open_collective("mpi");
    loom::CommOptions options;
    options.rank = host.job().rank;
    options.size = host.job().world_size;
    options.name = "boundary";
    std::unique_ptr<loom::Communicator> comm, comm_blocking;
    loom::check(mpi->create_comm(options, &comm), "comm_create");
    loom::check(mpi_blocking->create_comm(options, &comm_blocking), "comm_create (blocking)");
    MPI_Comm direct;
    MPI_Comm_dup(MPI_COMM_WORLD, &direct);

    // One float is where the boundary shows most; larger sizes show it fade.
    for (int count : {1, 1024, 65536}) {
      std::vector<float> in(count, 1.0f), out(count, 0.0f);
      const int n_iters = std::max(20, iters / std::max(1, count / 64));
      std::vector<double> plugin, plugin_blocking, blocking, nonblocking;
      for (int r = 0; r < rounds + 1; ++r) {
        double p = time_per_op_us(n_iters, [&] {
          comm->allreduce(in.data(), out.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
        });
        double pb = time_per_op_us(n_iters, [&] {
          comm_blocking->allreduce(in.data(), out.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM);
        });
        double b = time_per_op_us(n_iters, [&] {
          MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, direct);
        });
        double n = time_per_op_us(n_iters, [&] {
          MPI_Request req;
          MPI_Iallreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, direct, &req);
          MPI_Wait(&req, MPI_STATUS_IGNORE);
        });
        if (r == 0) continue;  // warm-up round
        plugin.push_back(p);
        plugin_blocking.push_back(pb);
        blocking.push_back(b);
        nonblocking.push_back(n);
      }
      if (options.rank == 0) {
        double p = median(plugin), pb = median(plugin_blocking), b = median(blocking), n = median(nonblocking);
        std::printf("# allreduce of %d float(s), %d ranks, %d iterations x %d rounds, median round, slowest rank\n",
                    count, options.size, n_iters, rounds);
        std::printf("%-52s %10s %10s\n", "path", "us/op", "ratio");
        std::printf("%-52s %10.3f %10.3f\n", "MPI_Allreduce (direct)", b, 1.0);
        std::printf("%-52s %10.3f %10.3f\n", "MPI_Iallreduce + MPI_Wait (direct)", n, n / b);
        std::printf("%-52s %10.3f %10.3f\n", "libmpi_collective.so, default (MPI_Iallreduce)", p, p / b);
        std::printf("%-52s %10.3f %10.3f\n", "libmpi_collective.so, blocking=true (MPI_Allreduce)", pb, pb / b);
        std::printf("boundary cost: plugin(blocking=true) / MPI_Allreduce = %.3f; "
                    "plugin(default) / MPI_Iallreduce+Wait = %.3f\n\n",
                    pb / b, p / n);
      }
    }
    MPI_Comm_free(&direct);
    comm.reset();
    comm_blocking.reset();
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom_bench_boundary: %s\n", e.what());
    return e.exit_code();
  }
}
