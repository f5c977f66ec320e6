// SPDX-License-Identifier: Apache-2.0
// What the plugin boundary costs: an allreduce through libmpi_collective.so
// against MPI_Allreduce called directly, in the same process and run, at 1,
// 1024 and 65536 floats. The plugin runs with its default non-blocking path
// (MPI_Iallreduce, waits can time out) and with its `blocking = true` option
// (MPI_Allreduce), each as:
//  - Communicator::allreduce: inline completion (ABI 1.1, request == NULL)
//    when the plugin declares LOOM_CAP_INLINE_COMPLETION, else post + wait;
//  - the raw vtable's allreduce with request == NULL (blocking = true only);
//  - iallreduce + wait: the request-object path every plugin has.
//
// The box is shared and noisy, so a run is many short rounds. In a round,
// every plugin path is timed right next to a fresh MPI_Allreduce
// measurement (baseline then path, or path then baseline, alternating by
// round; the paths in an order that rotates from round to round), and its
// ratio for the round is its time over that baseline. The report gives the
// median of those per-round ratios, with the quartiles to show the noise; a
// time is the slowest rank's mean per operation over one measurement.
//
//   mpirun --oversubscribe --allow-run-as-root -np 2 build/bin/loom_bench_boundary [us] [rounds]
//
// us: about how long one measurement lasts, in microseconds (default 1000;
// the operation count per measurement follows from a calibration run, at
// least 10); rounds: rounds per count (default 301).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/host.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// The slowest rank's mean microseconds per op over n ops.
double time_per_op_us(int n, const std::function<void()>& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) op();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
  double max_us = 0;
  MPI_Allreduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max_us;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

struct Path {
  Path(std::string l, std::function<void()> o) : label(std::move(l)), op(std::move(o)) {}
  std::string label;
  std::function<void()> op;
  std::vector<double> us, ratio, extra_ns;  // per round; extra_ns: path - baseline, per op
};

// Stops the run when a path returns an error: a failing op would time nothing.
// Cheap on success, so that the check adds nothing measurable to a path: the
// throwing part is out of line, so that each check_ok inlines into its path
// as one test (it was a call on the Communicator paths only, where
// loom::check's std::string argument made it too big to inline).
__attribute__((noinline, cold)) void stop(const loom::Status& s, const char* what) { loom::check(s, what); }
void check_ok(const loom::Status& s, const char* what) {
  if (!s.is_ok()) stop(s, what);
}
void check_ok(loom_status code, const loom::Collective& c, const char* what) {
  if (code != LOOM_OK) stop(c.error(code, what), what);
}

int positive_arg(int argc, char** argv, int i, int fallback) {
  if (argc <= i) return fallback;
  const int v = std::atoi(argv[i]);
  if (v <= 0) {
    std::fprintf(stderr, "loom_bench_boundary: argument %d must be a positive integer, not '%s'\n", i, argv[i]);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const double budget_us = positive_arg(argc, argv, 1, 1000);
  const int rounds = positive_arg(argc, argv, 2, 301);
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
    const char* inline_note = comm->completes_inline() ? "inline" : "post + wait: no inline completion";

    for (int count : {1, 1024, 65536}) {
      std::vector<float> in(count, 1.0f), out(count, 0.0f);
      const loom_collective_v1& vt = mpi_blocking->vtable();
      loom_comm* raw = comm_blocking->handle();
      std::vector<Path> paths;
      paths.emplace_back("MPI_Allreduce (direct)", [&] {
                         MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, direct);
                       });
      paths.emplace_back("MPI_Iallreduce + MPI_Wait (direct)", [&] {
                         MPI_Request req;
                         MPI_Iallreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, direct, &req);
                         MPI_Wait(&req, MPI_STATUS_IGNORE);
                       });
      paths.emplace_back(std::string("plugin default: Communicator::allreduce (") + inline_note + ")", [&] {
                         check_ok(comm->allreduce(in.data(), out.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM),
                                  "allreduce");
                       });
      paths.emplace_back("plugin default: iallreduce + wait", [&] {
                         loom::Request r;
                         check_ok(comm->iallreduce(in.data(), out.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM, &r),
                                  "iallreduce");
                         check_ok(r.wait(), "wait");
                       });
      const size_t target = paths.size();  // the path the 5% target is about
      paths.emplace_back(std::string("blocking=true: Communicator::allreduce (") + inline_note + ")", [&] {
                         check_ok(comm_blocking->allreduce(in.data(), out.data(), count, LOOM_DTYPE_F32,
                                                           LOOM_REDUCE_SUM),
                                  "allreduce");
                       });
      if (comm_blocking->completes_inline()) {
        paths.emplace_back("blocking=true: vtable allreduce, request = NULL", [&] {
                           check_ok(vt.allreduce(raw, in.data(), out.data(), count, LOOM_DTYPE_F32, LOOM_REDUCE_SUM,
                                                 nullptr),
                                    *mpi_blocking, "allreduce");
                         });
      }
      paths.emplace_back("blocking=true: iallreduce + wait", [&] {
                         loom::Request r;
                         check_ok(comm_blocking->iallreduce(in.data(), out.data(), count, LOOM_DTYPE_F32,
                                                            LOOM_REDUCE_SUM, &r),
                                  "iallreduce");
                         check_ok(r.wait(), "wait");
                       });

      // Warm every path up and check its result, then size the measurements.
      for (Path& p : paths) {
        std::fill(out.begin(), out.end(), 0.0f);
        time_per_op_us(10, p.op);
        if (out.front() != float(options.size) || out.back() != float(options.size))
          throw loom::Error::runtime(p.label + " gave a wrong sum");
      }
      // Equal on every rank: time_per_op_us returns the slowest rank's time.
      const double calib_us = time_per_op_us(50, paths[0].op);
      const int n = std::max(10, std::min(1000000, static_cast<int>(budget_us / calib_us)));
      for (int r = 0; r < rounds; ++r) {
        for (size_t k = 1; k < paths.size(); ++k) {
          const size_t p = 1 + (k - 1 + static_cast<size_t>(r)) % (paths.size() - 1);  // rotate who goes first
          double base_us, path_us;
          if (r % 2 == 0) {
            base_us = time_per_op_us(n, paths[0].op);
            path_us = time_per_op_us(n, paths[p].op);
          } else {
            path_us = time_per_op_us(n, paths[p].op);
            base_us = time_per_op_us(n, paths[0].op);
          }
          paths[0].us.push_back(base_us);
          paths[0].ratio.push_back(1.0);
          paths[0].extra_ns.push_back(0.0);
          paths[p].us.push_back(path_us);
          paths[p].ratio.push_back(path_us / base_us);
          paths[p].extra_ns.push_back(1000.0 * (path_us - base_us));
        }
      }
      if (options.rank != 0) continue;
      std::printf("# allreduce of %d float(s) (%d B), %d ranks: %d rounds, %d ops per measurement\n", count,
                  count * 4, options.size, rounds, n);
      std::printf("# us/op: median measurement (slowest rank); ratio: median over rounds of path / the\n"
                  "# MPI_Allreduce measurement next to it; p25, p75: quartiles of that ratio;\n"
                  "# +ns/op: median over rounds of (path - that MPI_Allreduce), per operation\n");
      std::printf("%-56s %9s %7s %7s %7s %9s\n", "path", "us/op", "ratio", "p25", "p75", "+ns/op");
      for (const Path& p : paths) {
        std::printf("%-56s %9.3f %7.3f %7.3f %7.3f %9.0f\n", p.label.c_str(), quantile(p.us, 0.5),
                    quantile(p.ratio, 0.5), quantile(p.ratio, 0.25), quantile(p.ratio, 0.75),
                    quantile(p.extra_ns, 0.5));
      }
      // The target: the plugin's fastest blocking path within 5% of MPI_Allreduce.
      const double best = quantile(paths[target].ratio, 0.5);
      std::printf("boundary cost at %d float(s): plugin blocking=true Communicator::allreduce / MPI_Allreduce = "
                  "%.3f (target <= 1.05: %s)\n\n",
                  count, best, best <= 1.05 ? "met" : "NOT met");
      std::fflush(stdout);
    }
    MPI_Comm_free(&direct);
    comm.reset();
    comm_blocking.reset();
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom_bench_boundary: %s\n", e.what());
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    // The other ranks may be inside a collective this rank will never join.
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, e.exit_code());
    return e.exit_code();
  }
}
