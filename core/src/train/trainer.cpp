// SPDX-License-Identifier: Apache-2.0
// The training loop. See loom/train/trainer.hpp for what it does; the
// strategy makes every distribution decision.
#include "loom/train/trainer.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "dump.hpp"
#include "files.hpp"
#include "loom/host.hpp"
#include "nonfinite.hpp"
#include "precision.hpp"
#include "progress.hpp"
#include "schedule.hpp"
#include "staging.hpp"
#include "../stop.hpp"
#include "state.hpp"

namespace loom::train {
namespace {

// A plugin that calls its input invalid (a swarm peer whose model is not the
// swarm's, an address it cannot listen on) is a configuration error: exit 2.
void check_status(const Status& s) {
  if (s.is_ok()) return;
  if (s.code() == LOOM_ERR_INVALID_ARGUMENT) throw Error::usage(s.to_string());
  throw Error::runtime(s.to_string());
}

// Mean over the processes training together.
double global_mean(Strategy& strategy, double value) {
  check_status(strategy.reduce_metric(&value, LOOM_METRIC_MEAN));
  return value;
}

// LibTorch's thread count does not reach the BLAS it calls: Debian's
// OpenBLAS keeps a thread spinning on every core, so a run with threads = 1
// used two cores and ranks sharing a machine fought over them. The BLAS is
// told the same count, when it is OpenBLAS (found at run time; absent
// otherwise).
void set_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

// glibc returns freed memory at the top of the heap (and every mmapped
// block) to the kernel at once, so a step's activations, freed at its end,
// were faulted in again at the next step: a fifth of a small GPT's step went
// to page faults. Freed memory now stays mapped up to 256 MiB, and blocks up
// to 32 MiB (glibc's largest threshold) come from the heap.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void choose_threads(const TrainerSettings& s, const JobInfo& job) {
  int threads = 0;
  if (s.threads > 0) {
    threads = static_cast<int>(s.threads);
  } else if (job.world_size > 1) {
    // Ranks on one machine share its cores; don't let each take them all.
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / job.world_size);
  }
  if (threads == 0) return;
  torch::set_num_threads(threads);
  set_blas_threads(threads);
}

// Where the model trains: trainer.device as set, with "cuda" meaning the
// local rank's own device when LOCAL_RANK (or Open MPI's) is set. A device
// this process cannot use is a configuration error (exit 2) that says why.
torch::Device training_device(const TrainConfig& config, const JobInfo& job) {
  const std::string& setting = config.trainer.device;
  if (setting == "cpu") return torch::Device(torch::kCPU);
  const std::string where = config.path + ": trainer.device = \"" + setting + "\"";
  if (!at::globalContext().hasCUDA())
    throw Error::usage(where + " but this LibTorch was built without CUDA (Debian's libtorch-dev is CPU-only; "
                       "build Loom against a CUDA LibTorch with -DTorch_DIR=...); valid here: \"cpu\"");
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0 || !torch::cuda::is_available())
    throw Error::usage(where + " but no CUDA device is visible to this process (check the driver and "
                       "CUDA_VISIBLE_DEVICES); valid here: \"cpu\"");
  int64_t index = 0;
  if (setting.size() > 5) {  // "cuda:N" (config.cpp checked the form)
    index = std::stoll(setting.substr(5));
  } else if (job.world_size > 1 || std::getenv("LOCAL_RANK") != nullptr) {
    index = job.local_rank;  // each local rank takes its own device
    if (index >= count)
      throw Error::usage(where + " with local rank " + std::to_string(index) + ", but this machine has " +
                         std::to_string(count) + " CUDA device(s): run at most that many ranks per machine, or set "
                         "trainer.device = \"cuda:N\" for each");
  }
  if (index >= count)
    throw Error::usage(where + ": device " + std::to_string(index) + " does not exist; this process sees " +
                       std::to_string(count) + " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

TrainResult run_training(const TrainConfig& config, const TrainRequest& request) {
  const TrainerSettings& s = config.trainer;
  const JobInfo job = JobInfo::from_environment();
  const torch::Device device = training_device(config, job);
  Host host(config.host, job);
  keep_freed_memory();
  choose_threads(s, host.job());
  // Every configured collective's options are checked now, used or not.
  for (const auto& [key, values] : config.host.options) {
    if (key.first == LOOM_KIND_COLLECTIVE) host.check_options(key.first, key.second);
  }
  if (!config.host.default_collective.empty() && host.find(LOOM_KIND_COLLECTIVE, config.host.default_collective) == nullptr) {
    std::string valid;
    for (const auto& n : host.names(LOOM_KIND_COLLECTIVE)) valid += (valid.empty() ? "" : ", ") + n;
    throw Error::usage(config.collective_where + ": collective.name = \"" + config.host.default_collective +
                       "\" is not in the plugin path; valid choices: " + (valid.empty() ? "none" : valid));
  }
  std::shared_ptr<Strategy> strategy;
  try {
    strategy = host.open_strategy(config.strategy);
  } catch (const Error& e) {
    if (e.exit_code() != Error::kUsage || config.strategy_where.empty()) throw;
    throw Error::usage(config.strategy_where + ": strategy.name = \"" + config.strategy + "\": " + e.what());
  }

  torch::manual_seed(s.seed);
  std::unique_ptr<Task> task = make_task(s.task, config.task, s.seed);
  if (!device.is_cpu()) {
    task->to(device);  // before the optimizer and the strategy's views hold the tensors
    spdlog::info("training on {}", device.str());
  }
  TrainingState state(*task, s);

  const std::string checkpoint = s.output_dir + "/checkpoint.pt";
  if (request.resume) {
    if (!file_exists(checkpoint)) {
      throw Error::usage("--resume: there is no checkpoint at " + checkpoint + " (trainer.output_dir = " + s.output_dir + ")");
    }
    state.restore(read_file(checkpoint));
  }
  // A strategy that works only on host memory (a swarm peer) is lent host
  // copies of a device's state, kept in step around each call (strategy.h,
  // LOOM_CAP_DEVICE_MEMORY). "always" stages on the CPU too, to check one.
  std::unique_ptr<HostStaging> staging;
  const bool device_strategy = (strategy->descriptor().capabilities & LOOM_CAP_DEVICE_MEMORY) != 0;
  if (s.host_staging == "always" || (!device.is_cpu() && !device_strategy)) {
    staging = std::make_unique<HostStaging>(state);
    spdlog::info("strategy {} works on host memory: the state's {:.1f} MiB are copied to the host and back around "
                 "each call into it",
                 strategy->descriptor().name, double(staging->bytes()) / (1 << 20));
  }
  // Runs one call into the strategy with the host copies in step.
  auto staged = [&](auto&& call) {
    if (staging) staging->pull();
    Status result = call();
    if (staging) staging->push();
    return result;
  };
  loom_training_state_v1 view = staging ? staging->abi_view() : state.abi_view();
  view.start_step = state.step;
  // Installed before setup, where a swarm peer may wait for min_peers or
  // load the swarm's state for a minute: asked to stop there, it leaves well
  // (its goodbye, exit 0) instead of dying by the signal. A job of several
  // shards (ddp) cannot lose one rank: its handlers go once setup says so,
  // and a signal that came meanwhile then takes its default action.
  std::optional<StopOnSignals> stop_on_signals;
  if (request.stop_on_signals) stop_on_signals.emplace();
  if (Status s = staged([&] { return strategy->setup(view); }); !s.is_ok()) {
    if (const Error* cause = strategy->host_error()) throw *cause;  // e.g. its collective is unavailable: exit 2
    // The strategy cannot train what this config asks (tensors on a device
    // or of a type it does not handle): a configuration error.
    if (s.code() == LOOM_ERR_UNSUPPORTED)
      throw Error::usage("strategy '" + strategy->descriptor().name + "' cannot train this run (trainer.device = \"" +
                         config.trainer.device + "\"): " + s.to_string());
    check_status(s);
  }
  // Snapshots (a donor's, a checkpointer's) carry the step the strategy
  // is at, which a swarm peer moves when it loads a state.
  state.set_step_source([&strategy] { return strategy->global_step(); });
  // From here the strategy holds views of `state`: tear it down before the
  // state goes, on every path out (strategy.h's lifecycle).
  struct TeardownGuard {
    Strategy* strategy;
    bool armed = true;
    ~TeardownGuard() {
      if (armed) (void)strategy->teardown();
    }
  } teardown_guard{strategy.get()};
  int32_t shard = 0, shards = 1;
  check_status(strategy->data_shard(&shard, &shards));
  if (shards < 1 || shard < 0 || shard >= shards) {
    throw Error::runtime("strategy '" + strategy->descriptor().name + "' reported data shard " + std::to_string(shard) +
                         " of " + std::to_string(shards) + ", which is not a valid share");
  }
  if (stop_on_signals && shards != 1) {
    const int pending = stop_signal();
    stop_on_signals.reset();
    if (pending != 0) ::raise(pending);
  }
  const auto stopping = [&] { return stop_on_signals && stop_signal() != 0; };
  const bool zero = strategy->is_global_zero();
  if (zero) {
    make_dirs(s.output_dir);
    remove_stale_temporaries(checkpoint);  // left by a run killed mid-write
  }

  // Peers that sample on their own get distinct orders through the salt.
  Sampler sampler(task->train_data().size(), s.batch_size, shard, shards, s.seed ^ strategy->sample_salt(),
                  task->train_data().blocks());
  if (!request.dump_init_dir.empty() && zero) dump_run(request.dump_init_dir, *task, state, sampler, s, /*with_data=*/true);
  Progress progress(zero ? s.output_dir + "/metrics.csv" : "", state.step, s.max_steps, request.resume);
  if (zero) {
    spdlog::info("training {} ({} parameters) for {} steps with strategy {} [{}]", task->name(),
                 [&] { int64_t n = 0; for (auto& p : state.params()) n += p.numel(); return n; }(), s.max_steps,
                 strategy->descriptor().name, strategy->status_line());
  }

  const bool bf16 = s.precision == "bf16";
  if (bf16 && zero) spdlog::info("precision bf16: the forward pass runs under autocast on {}", device.str());
  TrainResult result;
  result.global_zero = zero;
  result.headline = task->headline_metric();
  auto validate = [&](int64_t step) {
    const Dataset* val = task->validation_data();
    if (val == nullptr) return;
    torch::NoGradGuard no_grad;
    task->set_training(false);
    Metrics metrics = [&] {
      Autocast autocast(device, bf16);
      return task->evaluate(*val);
    }();
    task->set_training(true);
    std::string line;
    for (auto& [name, value] : metrics) {
      value = global_mean(*strategy, value);
      progress.record(step, "val_" + name, value);
      char item[64];
      std::snprintf(item, sizeof item, "%s%s %.4f", line.empty() ? "" : "  ", name.c_str(), value);
      line += item;
    }
    if (zero) spdlog::info("validation at step {}: {}", step, line);
    result.metrics = metrics;
  };
  auto save = [&]() {
    if (!zero) return;
    state.step = strategy->global_step();
    write_file_atomically(checkpoint, state.snapshot());
    result.checkpoint = checkpoint;
  };

  int64_t micro = state.step * s.accumulate;  // global micro-batch index drives the sample order
  int64_t samples = 0;
  double loss_sum = 0;
  int64_t loss_count = 0;
  task->set_training(true);
  int64_t step = strategy->global_step();
  NonFinitePolicy nonfinite(s.on_nonfinite);
  // A strategy that heals non-finite losses itself (a swarm peer reloads the
  // swarm's state) is handed them; the host then judges only the gradients
  // the strategy returns for a step.
  const bool heals = (strategy->descriptor().capabilities & LOOM_CAP_HEALS_NONFINITE) != 0;
  if (heals && zero)
    spdlog::info("strategy {} heals a non-finite loss itself (it reloads the swarm's state); trainer.on_nonfinite = "
                 "\"{}\" applies to the gradients it hands back",
                 strategy->descriptor().name, s.on_nonfinite);
  double window_loss = 0;  // summed since the last step: non-finite once any loss was
  while (step < s.max_steps && !strategy->should_stop() && !stopping()) {
    double this_window = 0;  // this window's summed loss, lent to the strategy as its mean (ABI 1.10)
    for (int64_t a = 0; a < s.accumulate; ++a, ++micro) {
      Batch batch = task->train_data().get(sampler.batch(micro));
      torch::Tensor loss;
      {
        Autocast autocast(device, bf16);
        loss = task->loss(batch);
      }
      (s.accumulate > 1 ? loss / double(s.accumulate) : loss).backward();
      const double value = loss.item<double>();
      window_loss += value;
      this_window += value;
      if (std::isfinite(value)) {
        loss_sum += value;
        ++loss_count;
      }
      samples += batch.size;
    }
    state.check_views();
    state.set_window_loss(this_window / double(s.accumulate));
    bool apply = false;
    check_status(staged([&] { return strategy->after_backward(static_cast<uint64_t>(s.batch_size * s.accumulate), &apply); }));
    if (!apply) {
      step = strategy->global_step();  // a swarm peer may have loaded a newer state meanwhile
      continue;
    }
    // Checked after the strategy averaged the gradients, so every rank of a
    // job sees the same and decides alike.
    const bool finite = (heals || std::isfinite(window_loss)) && state.grads_finite();
    window_loss = 0;
    const double lr = lr_at(s, step);
    if (nonfinite.apply(finite, step + 1)) {
      if (s.grad_clip > 0) torch::nn::utils::clip_grad_norm_(state.params(), s.grad_clip);
      state.set_lr(lr);
      state.optimizer().step();
    }
    check_status(staged([&] { return strategy->after_optimizer_step(); }));
    state.zero_grads();
    const int64_t before = step;
    step = strategy->global_step();
    // A swarm peer's global step can jump (it loaded a newer state), so an
    // interval fires when the step crosses a multiple, not only on it.
    auto crossed = [&](int64_t every) { return every > 0 && step / every > before / every; };

    if (crossed(s.log_every) || step == s.max_steps) {
      double loss = global_mean(*strategy, loss_sum / double(std::max<int64_t>(1, loss_count)));
      progress.record(step, "train_loss", loss);
      progress.record(step, "lr", lr);
      std::string line = progress.line(step, loss, lr, samples, strategy->status_line());
      if (zero) spdlog::info("{}", line);
      loss_sum = 0;
      loss_count = 0;
    }
    if (crossed(s.val_every) && step < s.max_steps) validate(step);
    if (crossed(s.checkpoint_every) && step < s.max_steps) save();
  }
  result.steps = step;
  if (stopping()) {
    // Asked to stop: no final validation (the user wants out, and it may be
    // long); the checkpoint resumes the run, or the swarm goes on without us.
    result.stopped_by = signal_name(stop_signal());
    spdlog::info("{} received: training stops at step {} of {}{}", result.stopped_by, step, s.max_steps,
                 zero ? "; writing a checkpoint" : "");
  } else {
    validate(step);
    for (const auto& [name, value] : result.metrics) {
      if (!std::isfinite(value)) throw Error::runtime("the final validation " + name + " is " + std::to_string(value) + ": the model diverged");
    }
  }
  save();
  if (!request.dump_final_dir.empty() && zero) dump_run(request.dump_final_dir, *task, state, sampler, s, false);
  if (nonfinite.skipped() > 0) spdlog::warn("{} steps were dropped for a non-finite loss or gradients", nonfinite.skipped());
  if (zero)
    spdlog::info("peak memory: {:.1f} MiB (VmHWM); CPU time {:.2f} s user, {:.2f} s system",
                 double(peak_rss_bytes()) / (1 << 20), cpu_seconds(false), cpu_seconds(true));
  teardown_guard.armed = false;
  check_status(staged([&] { return strategy->teardown(); }));
  return result;
}

}  // namespace loom::train
