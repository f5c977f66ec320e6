// SPDX-License-Identifier: Apache-2.0
// Fairness between the modes: glibc malloc's state, not the mode. All three
// modes live in one process and share one malloc heap, and with glibc's
// defaults where a step's memory lands depends on what was allocated and
// freed before: big blocks get their own mmap (freed straight back to the
// kernel), freeing one raises the mmap threshold for later ones, and a free
// top of the heap is trimmed back to the kernel. Measured with per-phase
// minor page faults (flt.* columns, --keep-memory 0, 2 ranks on 2 cores,
// 2 runs per order): in each process exactly one mode ran its compute with
// 24..72 faults a step and the other two with 3,000..3,900, and which one
// followed the construction order, not the mode: the first built when that
// was single or gloo (orders single,ddp,gloo and gloo,ddp,single), single
// when ddp was built first (ddp,gloo,single); ddp never. The default order
// thus handed `single` a head start. On top, ddp alone took ~2,800..2,950
// faults a step inside after_backward: a big scratch block allocated and
// freed per call below the plugin (presumably Open MPI's Iallreduce; not
// traced further), which glibc maps and unmaps each time. Gloo's buckets
// are preallocated, and the averaging timed alone (below) shows 0 faults, as
// nothing reshapes the heap in between. Gloo's earlier lead (its optimizer
// phase 15-25 ms a step faster) did not reproduce: at a load average of
// 1.2..2.2 the optimizer phase is 30..37 ms in every mode and order, and
// ddp/gloo was 1.02..1.06 in all 10 runs, every order, either policy; only
// runs at load 3.5..5 (two processes per core plus other users) fell to
// 0.91..0.96, with round times ranging 2x and more.
// So the bench now fixes the allocator's policy before building anything
// (--keep-memory 1, the default): mallopt(M_MMAP_MAX, 0) and a 1 GiB
// M_TRIM_THRESHOLD, so memory once mapped stays mapped and no mode pays page
// faults for its place in the allocation history. After warm-up every mode
// runs with 0 faults a step in compute and optimizer (ddp 0..150 in
// after_backward), and the order (--order, a permutation of single,ddp,gloo,
// the construction and warm-up order) moved ddp/gloo only within
// 1.03..1.06 and ddp/single within 0.95..0.97. --keep-memory 0 restores
// glibc's defaults, to see the effect. Check the load the script prints:
// figures taken at a load well above the 2 ranks are noise.
//
// Steps per second of the `charlm` task (about 10 M parameters) in three
// modes, in one binary and one run, so that their ratios are measured under
// the same machine load:
//
//   single  the built-in `single` strategy: no communication. Every rank runs
//           it at once, each its own independent job, so the ranks compete
//           for the cores exactly as they do in the two modes below.
//   ddp     the DDP strategy plugin over the MPI collective plugin, as
//           `loom train` runs it: Host::open_strategy("ddp") with option
//           collective = mpi, setup with the TrainingState's DLPack view, and
//           after_backward (bucketed, non-blocking allreduce) every step.
//   gloo    the same job averaging its gradients with LibTorch's own
//           c10d::ProcessGroupGloo (rendezvous through a c10d::TCPStore on
//           127.0.0.1): the gradients packed into the same buckets, one
//           asynchronous allreduce(SUM) per bucket, divided by the world size
//           and copied back.
//
// Every mode has its own task, model and Adam state built from the same seed
// and the same training loop as the trainer (forward, backward, the
// gradients' averaging, optimizer step, zeroing the gradients in place).
// Modes alternate in rounds (their order rotating) so that drift in machine
// load hits all of them alike; a round's time is the slowest rank's. Each
// step is split into phases (compute, averaging, optimizer) and the process's
// CPU time is kept, so a gap can be placed. Then the gradient averaging alone
// is timed on each path, with one flat allreduce of the whole gradient size,
// the four alternating within each of --reps repetitions.
//
//   mpirun --oversubscribe --allow-run-as-root -np 2 build/bin/loom_bench_train_step
//       [--text FILE] [--batch 8] [--warmup 3] [--steps 2] [--rounds 10] [--reps 9] [--threads N]
//       [--bucket-mb 25] [--order single,ddp,gloo] [--keep-memory 1] [--mpi KEY=VALUE ...] [--d-model 384] [--layers 6] [--heads 6] [--ffn 1536] [--context 64]
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1  // ProcessGroupGloo.hpp is empty without it (LibTorch's CMake usually sets it)
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <malloc.h>
#include <sys/resource.h>

#include "loom/host.hpp"
#include "loom/train/task.hpp"
#include "train/schedule.hpp"  // core/src: the bench is built inside the project
#include "train/state.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using loom::train::Task;
using loom::train::TrainingState;

struct Args {
  std::string text = "/usr/share/common-licenses/GPL-3";
  int64_t batch = 8, warmup = 3, steps = 2, rounds = 10, threads = 0, reps = 9, keep_memory = 1;
  double bucket_mb = 25;
  std::vector<std::string> order = {"single", "ddp", "gloo"};  // construction (and warm-up) order
  std::map<std::string, std::string> mpi;  // options of libmpi_collective.so (--mpi KEY=VALUE)
  std::map<std::string, std::string> task = {
      {"d_model", "384"}, {"layers", "6"}, {"heads", "6"}, {"ffn", "1536"}, {"context", "64"}};
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || i + 1 >= argc) {
      throw loom::Error::usage("argument '" + key + "': expected --NAME VALUE (see the header of bench/train_step.cpp)");
    }
    std::string value = argv[++i];
    key = key.substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    try {
      if (key == "text") a.text = value;
      else if (key == "batch") a.batch = std::stoll(value);
      else if (key == "warmup") a.warmup = std::stoll(value);
      else if (key == "steps") a.steps = std::stoll(value);
      else if (key == "rounds") a.rounds = std::stoll(value);
      else if (key == "threads") a.threads = std::stoll(value);
      else if (key == "reps") a.reps = std::stoll(value);
      else if (key == "keep_memory") a.keep_memory = std::stoll(value);
      else if (key == "bucket_mb") a.bucket_mb = std::stod(value);
      else if (key == "order") {
        a.order.clear();
        for (size_t at = 0; at <= value.size();) {
          const size_t comma = std::min(value.find(',', at), value.size());
          a.order.push_back(value.substr(at, comma - at));
          at = comma + 1;
        }
        auto sorted = a.order;
        std::sort(sorted.begin(), sorted.end());
        if (sorted != std::vector<std::string>{"ddp", "gloo", "single"})
          throw loom::Error::usage("--order: a permutation of single,ddp,gloo");
      }
      else if (key == "mpi" && value.find('=') != std::string::npos)
        a.mpi[value.substr(0, value.find('='))] = value.substr(value.find('=') + 1);
      else if (a.task.count(key)) a.task[key] = value;
      else throw loom::Error::usage("unknown option " + std::string(argv[i - 1]));
    } catch (const std::logic_error&) {
      throw loom::Error::usage("option " + std::string(argv[i - 1]) + ": '" + value + "' is not a number");
    }
  }
  if (a.batch < 1 || a.steps < 1 || a.rounds < 1 || a.reps < 1 || a.warmup < 0) {
    throw loom::Error::usage("--batch, --steps, --rounds and --reps must be at least 1, --warmup at least 0");
  }
  return a;
}

void check(const loom::Status& s, const char* what) { loom::check(s, what); }

// Averages the gradients with c10d::ProcessGroupGloo, bucketed the way the
// DDP plugin buckets them (reverse parameter order, a bucket closes once it
// holds bucket_mb MiB), every allreduce in flight before the first wait.
class GlooAverager {
 public:
  GlooAverager(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, const std::vector<torch::Tensor>& params,
               double bucket_mb)
      : pg_(std::move(pg)) {
    const auto cap = static_cast<int64_t>(bucket_mb * 1024 * 1024);
    Bucket open;
    for (size_t i = params.size(); i-- > 0;) {
      if (params[i].numel() == 0) continue;
      open.grads.push_back(params[i].grad().view({-1}));  // the gradient buffer itself (zeroed in place)
      open.numel += params[i].numel();
      if (open.numel * static_cast<int64_t>(sizeof(float)) >= cap) close(open);
    }
    if (open.numel > 0) close(open);
  }

  size_t buckets() const { return buckets_.size(); }

  void run() {
    torch::NoGradGuard no_grad;
    std::vector<c10::intrusive_ptr<c10d::Work>> work;
    for (Bucket& b : buckets_) {
      int64_t offset = 0;
      for (auto& g : b.grads) {
        b.flat.narrow(0, offset, g.numel()).copy_(g);
        offset += g.numel();
      }
      std::vector<at::Tensor> one{b.flat};
      work.push_back(pg_->allreduce(one));  // AllreduceOptions(): SUM
    }
    for (size_t k = 0; k < buckets_.size(); ++k) {
      work[k]->wait();
      Bucket& b = buckets_[k];
      b.flat.div_(pg_->getSize());
      int64_t offset = 0;
      for (auto& g : b.grads) {
        g.copy_(b.flat.narrow(0, offset, g.numel()));
        offset += g.numel();
      }
    }
  }

 private:
  struct Bucket {
    std::vector<torch::Tensor> grads;
    int64_t numel = 0;
    torch::Tensor flat;
  };
  void close(Bucket& b) {
    b.flat = torch::empty({b.numel}, torch::kFloat);
    buckets_.push_back(std::move(b));
    b = Bucket{};
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::vector<Bucket> buckets_;
};

// The median: robust to bursts of load from other processes.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One mode: its own task, state and sample order; averaging is what differs.
struct Mode {
  std::string name;
  std::unique_ptr<Task> task;
  std::unique_ptr<TrainingState> state;
  std::unique_ptr<loom::train::Sampler> sampler;
  std::shared_ptr<loom::Strategy> strategy;  // single or ddp
  std::unique_ptr<GlooAverager> gloo;
  int64_t micro = 0;
  std::vector<double> round_s;   // slowest rank's seconds per round
  // Per round, mean over ranks: seconds in each phase of the step, and the
  // process's CPU seconds (all its threads: Gloo's and MPI's included), which
  // shows time spent polling on a loaded machine, and the minor page faults
  // of the whole step (fresh memory the allocator maps).
  enum Phase { kCompute, kAverage, kOptimizer, kCpu, kFaultsCompute, kFaultsAverage, kFaultsOptimizer, kPhases };
  std::vector<double> phase_s[kPhases];
  double phase[kPhases] = {};  // this rank's seconds since the last reset

  // One trainer step (trainer.cpp, without logging, clipping or validation).
  void step(const loom::train::TrainerSettings& s) {
    const long faults0 = minor_faults();
    const auto t0 = Clock::now();
    auto batch = task->train_data().get(sampler->batch(micro++));
    torch::Tensor loss = task->loss(batch);
    loss.backward();
    volatile double seen = loss.item<double>();  // the trainer reads the loss every step too
    (void)seen;
    state->check_views();
    const auto t1 = Clock::now();
    const long faults1 = minor_faults();
    if (gloo) {
      gloo->run();
    } else {
      bool apply = false;
      check(strategy->after_backward(static_cast<uint64_t>(s.batch_size), &apply), "after_backward");
      if (!apply) throw loom::Error::runtime(name + ": the strategy did not apply a step");
    }
    const auto t2 = Clock::now();
    const long faults2 = minor_faults();
    state->set_lr(s.lr);
    state->optimizer().step();
    if (strategy) check(strategy->after_optimizer_step(), "after_optimizer_step");
    state->zero_grads();
    const auto t3 = Clock::now();
    phase[kCompute] += std::chrono::duration<double>(t1 - t0).count();
    phase[kAverage] += std::chrono::duration<double>(t2 - t1).count();
    phase[kOptimizer] += std::chrono::duration<double>(t3 - t2).count();
    // kept in thousands: printed like the seconds
    phase[kFaultsCompute] += static_cast<double>(faults1 - faults0) * 1e-3;
    phase[kFaultsAverage] += static_cast<double>(faults2 - faults1) * 1e-3;
    phase[kFaultsOptimizer] += static_cast<double>(minor_faults() - faults2) * 1e-3;
  }
};

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    if (args.keep_memory) {
      // See the header: memory the allocator once mapped stays mapped, and no
      // allocation gets its own mmap, whatever came before.
      mallopt(M_MMAP_MAX, 0);
      mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    loom::HostConfig config;
    config.search_path = loom::plugin_search_path({}, {});
    config.options[{LOOM_KIND_STRATEGY, "ddp"}]["collective"] = "mpi";
    config.options[{LOOM_KIND_STRATEGY, "ddp"}]["bucket_mb"] = std::to_string(args.bucket_mb);
    for (const auto& [key, value] : args.mpi) config.options[{LOOM_KIND_COLLECTIVE, "mpi"}][key] = value;
    loom::Host host(config, loom::JobInfo::from_environment());
    const int rank = host.job().rank, world = host.job().world_size;
    if (world < 2) {
      throw loom::Error::usage("run it on 2 or more ranks: mpirun --oversubscribe -np 2 " + std::string(argv[0]));
    }
    // As the trainer does: ranks on one machine share its cores.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = args.threads > 0 ? static_cast<int>(args.threads) : std::max(1, cores / world);
    torch::set_num_threads(threads);

    loom::train::TrainerSettings s;
    s.task = "charlm";
    s.batch_size = args.batch;
    s.optimizer = "adam";
    s.lr = 1e-3;
    s.seed = 1;
    loom::train::TaskOptions task_options;
    task_options.values = args.task;
    task_options.values["path"] = args.text;

    auto make_mode = [&](const std::string& name) {
      Mode m;
      m.name = name;
      torch::manual_seed(s.seed);
      m.task = loom::train::make_task(s.task, task_options, s.seed);
      m.state = std::make_unique<TrainingState>(*m.task, s);
      m.task->set_training(true);
      return m;
    };
    std::vector<Mode> modes;
    for (const auto& name : args.order) modes.push_back(make_mode(name));
    auto find = [&](const char* name) -> Mode& {
      return *std::find_if(modes.begin(), modes.end(), [&](const Mode& m) { return m.name == name; });
    };
    Mode &single = find("single"), &ddp = find("ddp"), &gloo = find("gloo");

    // ddp first: it also carries the bench's own coordination (barriers,
    // the Gloo store's port, the slowest rank's times).
    ddp.strategy = host.open_strategy("ddp");
    check(ddp.strategy->setup(ddp.state->abi_view()), "ddp setup");
    loom::Strategy& coord = *ddp.strategy;
    single.strategy = host.open_strategy("single");
    check(single.strategy->setup(single.state->abi_view()), "single setup");

    // Gloo: rank 0 serves a TCPStore on a port the OS picks and tells the others.
    c10d::TCPStoreOptions store_options;
    store_options.port = 0;
    store_options.isServer = rank == 0;
    store_options.numWorkers = static_cast<size_t>(world);
    store_options.waitWorkers = false;
    store_options.timeout = std::chrono::seconds(60);
    c10::intrusive_ptr<c10d::TCPStore> store;
    uint16_t port = 0;
    if (rank == 0) {
      store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
      port = store->getPort();
    }
    check(coord.broadcast_bytes(&port, sizeof port, 0), "broadcast of the TCPStore port");
    if (rank != 0) {
      store_options.port = port;
      store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
    }
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_options);
    {  // the same starting point as ddp: rank 0's parameters
      torch::NoGradGuard no_grad;
      for (auto& p : gloo.state->params()) {
        std::vector<at::Tensor> one{p};
        pg->broadcast(one)->wait();
      }
    }
    gloo.gloo = std::make_unique<GlooAverager>(pg, gloo.state->params(), args.bucket_mb);

    int32_t shard = 0, shards = 1;
    check(ddp.strategy->data_shard(&shard, &shards), "data_shard");
    const int64_t n = ddp.task->train_data().size();
    single.sampler = std::make_unique<loom::train::Sampler>(n, s.batch_size, 0, 1, s.seed + rank);
    ddp.sampler = std::make_unique<loom::train::Sampler>(n, s.batch_size, shard, shards, s.seed);
    gloo.sampler = std::make_unique<loom::train::Sampler>(n, s.batch_size, rank, world, s.seed);

    int64_t params = 0;
    for (auto& p : ddp.state->params()) params += p.numel();
    const double grad_bytes = static_cast<double>(params) * sizeof(float);
    const double mib = grad_bytes / (1 << 20);
    if (rank == 0) {
      std::printf("# charlm: %.2f M parameters (d_model %s, layers %s, heads %s, ffn %s, context %s), adam\n",
                  params / 1e6, args.task.at("d_model").c_str(), args.task.at("layers").c_str(),
                  args.task.at("heads").c_str(), args.task.at("ffn").c_str(), args.task.at("context").c_str());
      std::printf("# text: %s (%lld training windows); batch %lld per rank; %d ranks, %d intra-op thread(s) per rank "
                  "(%d cores)\n",
                  args.text.c_str(), static_cast<long long>(n), static_cast<long long>(args.batch), world, threads,
                  cores);
      std::printf("# %lld warm-up steps per mode, then %lld rounds x %lld timed steps per mode, modes alternating;\n"
                  "# a round's time is the slowest rank's; single runs on every rank at once, no communication\n",
                  static_cast<long long>(args.warmup), static_cast<long long>(args.rounds),
                  static_cast<long long>(args.steps));
      const char* nbc = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
      std::printf("# Open MPI coll_libnbc_iallreduce_algorithm (MPI_Iallreduce, the plugin's default path): %s\n",
                  nbc ? nbc : "not set (Open MPI's choice)");
      std::string mpi_options;
      for (const auto& [key, value] : args.mpi) mpi_options += " " + key + "=" + value;
      std::printf("# mpi collective options:%s\n", mpi_options.empty() ? " (defaults)" : mpi_options.c_str());
      std::fflush(stdout);
    }

    auto slowest = [&](double seconds) {
      check(coord.reduce_metric(&seconds, LOOM_METRIC_MAX), "reduce_metric");
      return seconds;
    };
    for (Mode& m : modes) {
      for (int64_t i = 0; i < args.warmup; ++i) m.step(s);
    }
    for (int64_t r = 0; r < args.rounds; ++r) {
      for (size_t j = 0; j < modes.size(); ++j) {
        Mode& m = modes[(j + static_cast<size_t>(r)) % modes.size()];
        check(coord.barrier(), "barrier");
        std::fill(std::begin(m.phase), std::end(m.phase), 0.0);
        const double cpu0 = cpu_seconds();
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < args.steps; ++i) m.step(s);
        m.round_s.push_back(slowest(std::chrono::duration<double>(Clock::now() - t0).count()));
        m.phase[Mode::kCpu] = cpu_seconds() - cpu0;
        for (int k = 0; k < Mode::kPhases; ++k) {
          check(coord.reduce_metric(&m.phase[k], LOOM_METRIC_MEAN), "reduce_metric");
          m.phase_s[k].push_back(m.phase[k]);
        }
      }
    }

    // The gradient averaging alone, on each path, and one flat allreduce of
    // the whole gradient size (buffers of equal contents on both paths). The
    // four alternate within each repetition, so drift in load hits them alike.
    auto mpi = host.open_collective("mpi");
    loom::CommOptions comm_options;
    comm_options.rank = rank;
    comm_options.size = world;
    comm_options.name = "train_step_flat";
    std::unique_ptr<loom::Communicator> comm;
    check(mpi->create_comm(comm_options, &comm), "comm_create");
    torch::Tensor flat = torch::ones({params}, torch::kFloat);
    struct Op {
      Op(const char* w, std::function<void()> r) : what(w), run(std::move(r)) {}
      const char* what;
      std::function<void()> run;
      std::vector<double> seconds;  // slowest rank's, per repetition
      double faults = 0, cpu = 0;   // per call, mean over ranks
    };
    std::vector<Op> ops = {
        {"ddp after_backward (mpi plugin, buckets)",
         [&] {
           bool apply = false;
           check(ddp.strategy->after_backward(static_cast<uint64_t>(s.batch_size), &apply), "after_backward");
         }},
        {"gloo buckets (pack, allreduce, divide, unpack)", [&] { gloo.gloo->run(); }},
        {"one flat allreduce avg, libmpi_collective.so",
         [&] {
           check(comm->allreduce(flat.data_ptr(), flat.data_ptr(), static_cast<uint64_t>(params), LOOM_DTYPE_F32,
                                 LOOM_REDUCE_AVG),
                 "allreduce");
         }},
        {"one flat allreduce sum + divide, ProcessGroupGloo",
         [&] {
           std::vector<at::Tensor> one{flat};
           pg->allreduce(one)->wait();
           flat.div_(world);
         }},
    };
    for (Op& op : ops) op.run();  // warm-up
    for (int64_t i = 0; i < args.reps; ++i) {
      for (Op& op : ops) {
        check(coord.barrier(), "barrier");
        const long faults0 = minor_faults();
        const double cpu0 = cpu_seconds();
        const auto t0 = Clock::now();
        op.run();
        op.seconds.push_back(slowest(std::chrono::duration<double>(Clock::now() - t0).count()));
        op.cpu += cpu_seconds() - cpu0;
        op.faults += static_cast<double>(minor_faults() - faults0);
      }
    }
    for (Op& op : ops) {
      for (double* v : {&op.faults, &op.cpu}) {
        *v /= static_cast<double>(args.reps);
        check(coord.reduce_metric(v, LOOM_METRIC_MEAN), "reduce_metric");
      }
    }

    if (rank == 0) {
      const double per_round = static_cast<double>(args.steps);
      std::map<std::string, double> rate;
      std::printf("# construction order: %s,%s,%s; keep-memory %lld\n", args.order[0].c_str(), args.order[1].c_str(),
                  args.order[2].c_str(), static_cast<long long>(args.keep_memory));
      std::printf("\n%-8s %9s %9s %12s %12s | %9s %9s %9s %9s %9s %9s %9s\n", "mode", "steps/s", "ms/step", "mean ms/step",
                  "range ms/step", "compute", "average", "optimizer", "cpu", "flt.comp", "flt.avg", "flt.opt");
      for (const Mode& m : modes) {
        rate[m.name] = per_round / median(m.round_s);
        double total = 0;
        for (double x : m.round_s) total += x;
        const auto [lo, hi] = std::minmax_element(m.round_s.begin(), m.round_s.end());
        char range[48];
        std::snprintf(range, sizeof range, "%.0f..%.0f", *lo * 1e3 / per_round, *hi * 1e3 / per_round);
        std::printf("%-8s %9.3f %9.1f %12.1f %12s |", m.name.c_str(), rate[m.name], 1e3 / rate[m.name],
                    total * 1e3 / (per_round * m.round_s.size()), range);
        for (const auto& phase : m.phase_s) std::printf(" %9.1f", median(phase) * 1e3 / per_round);
        std::printf("\n");
      }
      std::printf("(steps/s and ms/step: the median round, slowest rank. After the bar, ms per step, median round,\n"
                  " mean over ranks: compute = forward, backward, loss; average = after_backward or the Gloo buckets,\n"
                  " waiting for the slower rank included; optimizer = Adam step and zeroing; cpu = the process's CPU\n"
                  " time, all threads; flt.* = minor page faults per step in each phase)\n");
      // Also the median of the ratios within each round: a round's modes run
      // back to back, so this pairs measurements taken under the same load.
      auto paired = [&](const Mode& a, const Mode& b) {
        std::vector<double> r;
        for (size_t k = 0; k < a.round_s.size(); ++k) r.push_back(b.round_s[k] / a.round_s[k]);
        return median(r);
      };
      std::printf("\nratio ddp/gloo   (steps/s): %.3f   (target >= 1.0: %s); median of per-round ratios %.3f\n",
                  rate["ddp"] / rate["gloo"], rate["ddp"] >= rate["gloo"] ? "met" : "NOT met", paired(ddp, gloo));
      std::printf("ratio ddp/single (steps/s): %.3f; median of per-round ratios %.3f\n", rate["ddp"] / rate["single"],
                  paired(ddp, single));

      const double busbw = 2.0 * (world - 1) / world;
      std::printf("\n# gradients: %.2f MiB of f32 in %zu bucket(s) of about %s MiB; median of %lld, slowest rank;\n"
                  "# cpu ms and minor page faults per call: mean over repetitions and ranks\n",
                  mib, gloo.gloo->buckets(), fmt("%g", args.bucket_mb).c_str(), static_cast<long long>(args.reps));
      std::printf("%-52s %9s %11s %11s %8s %8s\n", "averaging path", "ms", "algbw GB/s", "busbw GB/s", "cpu ms",
                  "faults");
      for (const Op& op : ops) {
        const double sec = median(op.seconds);
        std::printf("%-52s %9.2f %11.3f %11.3f %8.1f %8.0f\n", op.what, sec * 1e3, grad_bytes / sec / 1e9,
                    grad_bytes / sec / 1e9 * busbw, op.cpu * 1e3, op.faults);
      }
      std::printf("averaging alone, time gloo/ddp: %.3f (above 1: the plugin path averages faster)\n",
                  median(ops[1].seconds) / median(ops[0].seconds));
      std::fflush(stdout);
    }

    // Shut down in an order every rank shares: Gloo, then the store (rank 0
    // serves it), then the strategies (the last MPI user finalizes MPI).
    comm.reset();
    check(coord.barrier(), "barrier");
    gloo.gloo.reset();
    pg.reset();
    check(coord.barrier(), "barrier");
    store.reset();
    check(single.strategy->teardown(), "single teardown");
    check(ddp.strategy->teardown(), "ddp teardown");
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom_bench_train_step: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom_bench_train_step: %s\n", e.what());
    return 1;
  }
}
