// SPDX-License-Identifier: Apache-2.0
// `loom plugins check NAME|PATH`: the conformance kit against one plugin.
//
// A collective is first opened here and runs one allreduce (the quick
// check, also what a rank of a launched job does); then the kit,
// loom_conformance, runs on N local processes (loom launch's machinery) and
// reports every case, which this prints as a table by rule, operation and
// dtype. A strategy is checked by negotiation, its option table, and a
// short real training run on N processes in which the host calls its hooks
// in order.
#include "check_kit.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "commands.hpp"
#include "loom/collective.hpp"
#include "loom/launch.hpp"
#include "loom/status.hpp"
#include "table.hpp"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

// The quick check: open the collective in this process, one real allreduce.
// Before the kit, only the opening (its errors are usage errors, exit 2):
// a wrong result is the kit's to report, rule by rule.
void smoke(Host& host, const std::string& name, bool quick, const std::string& device) {
  auto collective = host.open_collective(name);  // throws Error::usage with path and reason
  if (device == "cuda" && !collective->has_capability(LOOM_CAP_CUDA_MEMORY))
    throw Error::usage("collective '" + name + "' (" + collective->path() + ") takes no CUDA memory; drop --device cuda");
  if (device == "cpu" && !collective->has_capability(LOOM_CAP_HOST_MEMORY)) {
    throw Error::usage("collective '" + name + "' (" + collective->path() +
                       ") takes device memory only; check it on its device: loom plugins check " + name +
                       " --device cuda");
  }
  if (!quick) return;
  const JobInfo& job = host.job();
  CommOptions options;
  options.rank = job.rank;
  options.size = job.world_size;
  options.timeout = std::chrono::seconds(60);
  options.name = "check";
  std::unique_ptr<Communicator> comm;
  loom::check(collective->create_comm(options, &comm), "creating a communicator of " + std::to_string(job.world_size));
  int64_t mine = job.rank + 1, sum = 0;
  loom::check(comm->allreduce(&mine, &sum, 1, LOOM_DTYPE_I64, LOOM_REDUCE_SUM), "allreduce");
  const int64_t expected = int64_t(job.world_size) * (job.world_size + 1) / 2;
  if (sum != expected)
    throw Error::runtime("allreduce returned " + std::to_string(sum) + ", expected " + std::to_string(expected));
  if (job.rank == 0) {
    std::cout << "ok: collective '" << name << "' " << collective->descriptor().version << " (ABI "
              << abi_string(collective->descriptor().abi_version) << ") from " << collective->path() << ": "
              << job.world_size << " rank(s), allreduce verified\n";
  }
}

// A scratch folder, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "loom-check-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error::runtime("cannot create a folder under /tmp for the report");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

LaunchResult run_ranks(int n, std::vector<std::string> command, std::chrono::minutes limit) {
  LaunchOptions launch;
  launch.nproc = n;
  launch.timeout = limit;
  launch.command = std::move(command);
  return loom::launch(launch);
}

int check_collective(const GlobalOptions& global, const CheckArgs& args, const std::string& name, Host& host) {
  const JobInfo& job = host.job();
  // Inside a launched job every rank only takes part in the quick check.
  if (args.quick || job.world_size > 1) {
    smoke(host, name, true, "cpu");
    return 0;
  }
  smoke(host, name, false, args.device);
  const std::string kit = find_kit();
  const std::set<std::string> ops = parse_ops(args.ops);
  const std::vector<std::string> cases = ops.empty() ? std::vector<std::string>() : list_cases(kit);
  std::vector<std::string> chosen;  // with --op: its cases and the general rules
  for (const auto& c : cases) {
    const auto dot = c.find('.');
    const std::string op = case_op(c.substr(0, dot), c.substr(dot + 1));
    if (ops.count(op) || op == "(all)") chosen.push_back(c);
  }
  TempDir tmp;
  const std::string prefix = (tmp.path() / "report").string();
  std::vector<std::string> command = {kit, "--plugin", name, "--report", prefix, "--timeout-ms",
                                      std::to_string(args.timeout_ms), "--device", args.device, "--gtest_brief=1"};
  const std::string folder = fs::path(host.find(LOOM_KIND_COLLECTIVE, name)->path).parent_path().string();
  command.push_back("--plugin-path");
  command.push_back(folder);
  for (const auto& dir : global.plugin_paths) {
    command.push_back("--plugin-path");
    command.push_back(dir);
  }
  // The config's options for it first, so that --option wins (the kit keeps the last).
  if (auto it = host.config().options.find({LOOM_KIND_COLLECTIVE, name}); it != host.config().options.end()) {
    for (const auto& [key, value] : it->second) {
      command.push_back("--option");
      command.push_back(key + "=" + value);
    }
  }
  for (const auto& o : args.options) {
    command.push_back("--option");
    command.push_back(o);
  }
  if (!ops.empty()) {
    std::string filter;
    for (const auto& c : chosen) filter += (filter.empty() ? "" : ":") + c;
    command.push_back("--gtest_filter=" + filter);
  }
  std::cout << "checking collective '" << name << "' with the conformance kit on " << args.nproc << " process(es)"
            << (ops.empty() ? "" : ", operations: " + join(std::vector<std::string>(ops.begin(), ops.end()))) << "\n"
            << std::flush;
  const LaunchResult run = run_ranks(args.nproc, command, std::chrono::minutes(15));
  KitReport report = read_reports(prefix, args.nproc);
  print_report(report, std::cout);
  if (report.cases == 0) {
    std::cerr << "loom: error: the conformance kit reported no cases (its output above says why)\n";
    return run.exit_code != 0 ? run.exit_code : 1;
  }
  const bool failed = report.failed > 0 || run.exit_code != 0;
  std::cout << (failed ? "FAILED" : "passed") << ": collective '" << name << "': " << report.passed << " passed, "
            << report.failed << " failed, " << report.skipped << " skipped, of " << report.cases << " cases on "
            << args.nproc << " process(es)\n";
  return failed ? 1 : 0;
}

// A strategy: negotiation and options were checked when it was listed; the
// host calls its hooks in order in a short real run (2 ranks of the teacher
// task by default), which must end with exit code 0.
int check_strategy(const GlobalOptions& global, const CheckArgs& args, const std::string& name, Host& host) {
  const PluginRecord record = host.probe(*host.find(LOOM_KIND_STRATEGY, name));
  if (record.state != PluginRecord::State::kOk)
    throw Error::usage("strategy '" + name + "' (" + record.candidate.path + ") is " + record.status_text());
  TempDir tmp;
  const fs::path config = tmp.path() / "check.toml";
  std::ofstream out(config);
  out << "[trainer]\ntask = \"teacher\"\nmax_steps = 6\nbatch_size = 16\noptimizer = \"adam\"\nlr = 0.01\n"
      << "log_every = 2\nval_every = 6\noutput_dir = \"" << (tmp.path() / "run").string() << "\"\n\n"
      << "[task]\ninputs = 8\nhidden = 16\nsamples = 512\n\n[strategy]\nname = \"" << name << "\"\n";
  if (!args.options.empty()) {
    out << "\n[strategy.options]\n";
    for (const auto& o : args.options) {
      const auto eq = o.find('=');
      if (eq == std::string::npos || eq == 0) throw Error::usage("--option wants KEY=VALUE, not '" + o + "'");
      out << o.substr(0, eq) << " = \"" << o.substr(eq + 1) << "\"\n";
    }
  }
  out.close();
  std::vector<std::string> command = {fs::read_symlink("/proc/self/exe").string(), "train", config.string(),
                                      "--log-level", "warn"};
  for (const auto& dir : global.plugin_paths) {
    command.push_back("--plugin-path");
    command.push_back(dir);
  }
  std::cout << "checking strategy '" << name << "': negotiation and options ok; a 6-step run of the teacher task on "
            << args.nproc << " process(es)\n"
            << std::flush;
  const LaunchResult run = run_ranks(args.nproc, command, std::chrono::minutes(10));
  Table table({"RULE", "RESULT", "NOTE"});
  table.add({"negotiation", "passed", "ABI " + abi_string(record.descriptor->abi_version)});
  table.add({"options", "passed", std::to_string(record.descriptor->options.size()) + " declared, names and types valid"});
  std::string note;
  for (const auto& f : run.failures) note += (note.empty() ? "" : "; ") + f;
  table.add({"hooks in order (training run)", run.exit_code == 0 ? "passed" : "failed",
             run.exit_code == 0 ? "setup, after_backward, after_optimizer_step, teardown" : note});
  table.print(std::cout);
  std::cout << (run.exit_code == 0 ? "passed" : "FAILED") << ": strategy '" << name << "'\n";
  return run.exit_code == 0 ? 0 : 1;
}

}  // namespace

int check_plugin(const GlobalOptions& global, const CheckArgs& args) {
  if (args.nproc < 1) throw Error::usage("-n wants at least 1 process, not " + std::to_string(args.nproc));
  if (args.device != "cpu" && args.device != "cuda")
    throw Error::usage("--device wants cpu or cuda, not '" + args.device + "'");
  GlobalOptions scoped = global;
  Target target = resolve_target(args.target, args.kind);
  if (!target.folder.empty()) scoped.plugin_paths.insert(scoped.plugin_paths.begin(), target.folder);
  auto host = make_host(scoped);
  const PluginCandidate* c = nullptr;
  if (target.folder.empty()) {
    c = &select_plugin(*host, target.name, args.kind);
  } else {
    c = host->find(target.kind, target.name);
    const fs::path given = fs::path(target.folder) / fs::path(args.target).filename();
    if (c == nullptr || fs::path(c->path) != given) {
      throw Error::usage("the file " + args.target + " is not what loom would load as " + kind_name(target.kind) +
                         " '" + target.name + "'" + (c ? " (that is " + c->path + ")" : std::string()));
    }
  }
  return c->kind == LOOM_KIND_COLLECTIVE ? check_collective(scoped, args, target.name, *host)
                                         : check_strategy(scoped, args, target.name, *host);
}

}  // namespace loom::cli
