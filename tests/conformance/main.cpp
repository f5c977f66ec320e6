// SPDX-License-Identifier: Apache-2.0
// main.cpp: loom_conformance, the collective conformance suite.
//
//   mpirun -np N loom_conformance [gtest flags] --plugin NAME
//          [--plugin-path DIR]... [--timeout-ms N] [--option KEY=VALUE]...
//
// Every rank runs the same tests in the same order on one world
// communicator of the plugin under test. Only rank 0 prints GoogleTest's
// report; other ranks print their failures, each line prefixed "[rank r]".
//
// Exit code: at the end the ranks allgather their pass/fail flags through the
// communicator under test, and every rank exits 1 when any rank failed (rank
// 0 names them), 0 otherwise. Should that exchange itself fail, each rank
// exits with its own result; either way mpirun propagates a non-zero exit.
// Usage errors and a plugin that cannot be opened exit 2, as DESIGN.md says.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "case_data.hpp"
#include "cuda_memory.hpp"
#include "loom/job.hpp"
#include "loom/plugin_record.hpp"
#include "report.hpp"
#include "run_op.hpp"
#include "world.hpp"

namespace conformance {
namespace {

const char kUsage[] =
    "usage: loom_conformance [gtest flags] --plugin NAME [--plugin-path DIR]... [--timeout-ms N]\n"
    "                        [--option KEY=VALUE]... [--device cpu|cuda] [--report PREFIX]\n"
    "  --plugin NAME       collective plugin under test (lib<NAME>_collective.so)\n"
    "  --plugin-path DIR   look for plugins here first (repeatable)\n"
    "  --timeout-ms N      bound of every wait, default 20000\n"
    "  --option KEY=VALUE  set one of the plugin's options (repeatable)\n"
    "  --device cpu|cuda   where the buffers live, default cpu; cuda: CUDA managed memory on the\n"
    "                      local rank's device (every case skips, saying why, where there is none)\n"
    "  --report PREFIX     also write each case's result to PREFIX.<rank>.jsonl (loom plugins check)\n";

// Parses what GoogleTest left in argv; false with *error on a usage error.
bool parse_args(int argc, char** argv, SuiteOptions* options, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg != "--plugin" && arg != "--plugin-path" && arg != "--timeout-ms" && arg != "--option" &&
        arg != "--device" && arg != "--report") {
      *error = "unknown argument '" + std::string(argv[i]) + "'";
      return false;
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        *error = arg + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    if (arg == "--plugin") {
      options->plugin = value;
    } else if (arg == "--plugin-path") {
      options->plugin_paths.push_back(value);
    } else if (arg == "--report") {
      options->report = value;
    } else if (arg == "--device") {
      if (value != "cpu" && value != "cuda") {
        *error = "--device wants cpu or cuda, not '" + value + "'";
        return false;
      }
      options->device = value;
    } else if (arg == "--option") {
      const size_t sep = value.find('=');
      if (sep == 0 || sep == std::string::npos) {
        *error = "--option wants KEY=VALUE, not '" + value + "'";
        return false;
      }
      options->plugin_options[value.substr(0, sep)] = value.substr(sep + 1);
    } else {
      char* end = nullptr;
      const long long ms = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || ms <= 0) {
        *error = "--timeout-ms wants a positive integer, not '" + value + "'";
        return false;
      }
      options->timeout_ms = ms;
    }
  }
  if (options->plugin.empty()) {
    *error = "--plugin NAME is required";
    return false;
  }
  return true;
}

// Replaces the default printer on ranks other than 0: only failures, each
// line prefixed with the rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : prefix_("[rank " + std::to_string(rank) + "] ") {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::ostringstream text;
    text << (result.file_name() ? result.file_name() : "unknown file") << ":" << result.line_number()
         << ": Failure\n"
         << result.message();
    print(text.str());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) print(std::string("[  FAILED  ] ") + info.test_suite_name() + "." + info.name());
  }

 private:
  void print(const std::string& text) const {
    std::istringstream lines(text);
    std::string out, line;
    while (std::getline(lines, line)) out += prefix_ + line + "\n";
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
  }
  std::string prefix_;
};

void print_banner() {
  const loom::Collective& c = World::collective();
  std::string caps;
  for (const std::string& cap : loom::capability_names(LOOM_KIND_COLLECTIVE, c.descriptor().capabilities))
    caps += (caps.empty() ? "" : ", ") + cap;
  std::string opts;
  for (const auto& [key, value] : World::options().plugin_options) opts += " " + key + "=" + value;
  std::printf("[conformance] plugin %s %s (%s), %d rank(s), capabilities: %s, timeout %lld ms, options:%s\n",
              c.descriptor().name.c_str(), c.descriptor().version.c_str(), c.path().c_str(), World::size(),
              caps.c_str(), static_cast<long long>(World::timeout_ms()), opts.empty() ? " defaults" : opts.c_str());
  std::fflush(stdout);
}

// Skips every case, with the reason, before any runs (no device here).
class SkipEverything : public testing::Environment {
 public:
  explicit SkipEverything(std::string why) : why_(std::move(why)) {}
  void SetUp() override { GTEST_SKIP() << "CUDA cases skipped: " << why_; }

 private:
  std::string why_;
};

// Exit code of this rank, from every rank's result.
int agree_on_exit_code(bool failed_here) {
  const int rank = World::rank();
  Buffer flag(LOOM_DTYPE_I32, 1), all(LOOM_DTYPE_I32, static_cast<size_t>(World::size()));  // --device cuda: device memory
  flag.set(0, failed_here ? 1 : 0);
  loom::Request request;
  loom::Status s;
  if (World::collective().offers(LOOM_OP_ALLGATHER)) {
    s = World::comm().iallgather(flag.data(), all.data(), 1, LOOM_DTYPE_I32, &request);
  } else {  // a plugin without allgather (absent_ops): each rank's flag in its own slot, summed
    for (size_t r = 0; r < all.count(); ++r) all.set(r, static_cast<int>(r) == rank && failed_here ? 1 : 0);
    s = World::comm().iallreduce(all.data(), all.data(), all.count(), LOOM_DTYPE_I32, LOOM_REDUCE_SUM, &request);
  }
  if (s.is_ok()) s = complete(request, World::timeout_ms());
  if (!s.is_ok()) {
    std::printf("[rank %d] [conformance] could not gather the other ranks' results (%s); exiting with this "
                "rank's own result\n",
                rank, s.to_string().c_str());
    return failed_here ? 1 : 0;
  }
  std::string failed;
  for (size_t r = 0; r < all.count(); ++r)
    if (all.get(r) != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (rank == 0) {
    if (failed.empty()) std::printf("[conformance] all %d rank(s) passed\n", World::size());
    else std::printf("[conformance] FAILED on rank(s) %s (their failures are the [rank r] lines)\n", failed.c_str());
    std::fflush(stdout);
  }
  return failed.empty() ? 0 : 1;
}

}  // namespace
}  // namespace conformance

int main(int argc, char** argv) {
  using namespace conformance;
  bool help = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) help = true;
  // mpirun hands rank 0 a pseudo-terminal, so "auto" would colour logs that
  // end up in files (ctest); colour only when asked for.
  if (!std::getenv("GTEST_COLOR")) GTEST_FLAG_SET(color, "no");
  testing::InitGoogleTest(&argc, argv);
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();  // listing needs no plugin

  SuiteOptions options;
  std::string error;
  if (!parse_args(argc, argv, &options, &error)) {
    std::fprintf(stderr, "loom_conformance: %s\n%s", error.c_str(), kUsage);
    return 2;
  }
  if (options.device == "cuda") {
    // One device per local rank, as NCCL wants (it refuses two ranks of one
    // communicator on one GPU).
    const loom::JobInfo job = loom::JobInfo::from_environment();
    const int device = job.local_rank > 0 ? job.local_rank : 0;
    const std::string why = cuda::probe(device);
    if (!why.empty()) {
      // Every case skips with the reason, and the run passes: there is
      // nothing here to check CUDA memory on.
      std::printf("[conformance] CUDA cases skipped: %s\n", why.c_str());
      std::fflush(stdout);
      testing::AddGlobalTestEnvironment(new SkipEverything(why));
      return RUN_ALL_TESTS();
    }
    options.device_id = device;
    use_cuda_buffers(true);
  }
  try {
    World::open(options);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom_conformance: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom_conformance: %s\n", e.what());
    return 1;
  }

  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (!options.report.empty()) {
    auto writer = make_report_writer(options.report, World::rank(), &error);
    if (!writer) {
      std::fprintf(stderr, "loom_conformance: %s\n", error.c_str());
      World::close();
      return 2;
    }
    listeners.Append(writer.release());  // gtest owns it from here
  }
  if (World::rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(World::rank()));
  } else {
    print_banner();
  }

  const bool failed_here = RUN_ALL_TESTS() != 0;
  const int code = agree_on_exit_code(failed_here);
  World::close();
  return code;
}
