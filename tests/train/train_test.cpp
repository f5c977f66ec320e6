// SPDX-License-Identifier: Apache-2.0
// `loom train` as users run it: real runs of the built-in tasks, config
// errors, resuming after a SIGKILL, and a stop asked for by SIGINT.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "dump_reader.hpp"
#include "train_support.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string teacher_config(const fs::path& out, int steps, int checkpoint_every) {
  return "[trainer]\ntask = \"teacher\"\nmax_steps = " + std::to_string(steps) +
         "\nbatch_size = 32\noptimizer = \"adam\"\nlr = 0.01\nschedule = \"cosine\"\nlog_every = 100\n"
         "checkpoint_every = " + std::to_string(checkpoint_every) + "\nthreads = 1\noutput_dir = \"" + out.string() +
         "\"\n[task]\nsamples = 65536\nhidden = 256\n";
}

// Runs the teacher run `name` uninterrupted to steps, its final weights
// dumped to <name>-final; "" on success, else why it failed.
std::string reference_run(const TempDir& dir, const std::string& name, int steps, int checkpoint_every) {
  auto cfg = dir.file(name + ".toml", teacher_config(dir.path / name, steps, checkpoint_every));
  auto r = train({cfg, "--dump-final", (dir.path / (name + "-final")).string()});
  return r.exit_code == 0 ? "" : r.err;
}

// The largest relative difference between two runs' final weights.
double final_difference(const TempDir& dir, const std::string& a, const std::string& b) {
  return max_relative_difference(read_params((dir.path / (a + "-final")).string()),
                                 read_params((dir.path / (b + "-final")).string()));
}

TEST(Train, DigitsReaches95PercentWithSingle) {
  TempDir dir;
  auto cfg = dir.file("digits.toml",
                      "[trainer]\ntask = \"digits\"\nmax_steps = 400\nbatch_size = 64\nlr = 0.002\nschedule = \"cosine\"\n"
                      "seed = 3\noutput_dir = \"" + (dir.path / "run").string() + "\"\n");
  auto r = train({cfg}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double accuracy = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "final accuracy: %lf", &accuracy), 1) << r.out;
  EXPECT_GE(accuracy, 0.95);
  EXPECT_TRUE(fs::exists(dir.path / "run" / "checkpoint.pt"));
  EXPECT_TRUE(fs::exists(dir.path / "run" / "metrics.csv"));
}

TEST(Train, ResumeAfterSigkillEndsWithTheSameWeights) {
  TempDir dir;
  const int steps = 3000;
  ASSERT_EQ(reference_run(dir, "ref", steps, 500), "");
  // The same run, killed after its first checkpoint, then resumed.
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run", steps, 500));
  const fs::path checkpoint = dir.path / "run" / "checkpoint.pt";
  {
    Child child({kLoomBinary, "train", cfg}, {{"RANK", ""}, {"WORLD_SIZE", ""}});
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!fs::exists(checkpoint) && child.running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_TRUE(child.running()) << "the run ended before it could be killed; make it longer";
    child.kill(SIGKILL);
    child.wait(10s);
  }
  auto r = train({cfg, "--resume", "--dump-final", (dir.path / "run-final").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(final_difference(dir, "run", "ref"), 0.0) << "resumed weights differ from the uninterrupted run's";
}

TEST(Train, ASigintStopsAtAStepBoundaryWithACheckpointThatResumesToTheSameWeights) {
  TempDir dir;
  const int steps = 3000;
  ASSERT_EQ(reference_run(dir, "ref", steps, 1000), "");
  // Interrupted once it has logged progress: a stop the user asked for
  // ends at a step boundary, exits 0 and leaves a checkpoint of that step.
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run", steps, 1000));
  const std::string log = dir / "run.log";
  auto text = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    Child child({kLoomBinary, "train", cfg}, {{"RANK", ""}, {"WORLD_SIZE", ""}}, log);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (text().find("step 200/") == std::string::npos && child.running() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(child.running()) << "the run ended before it could be interrupted; make it longer\n" << text();
    child.kill(SIGINT);
    const int status = child.wait(20s);
    ASSERT_NE(status, -1) << "no exit within 20 s of SIGINT\n" << text();
    ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status) << "\n" << text();
    EXPECT_EQ(WEXITSTATUS(status), 0) << text();
  }
  const std::string out = text();
  long long stopped_at = -1;
  const auto at = out.find("stopped by SIGINT after ");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "stopped by SIGINT after %lld steps", &stopped_at), 1) << out;
  EXPECT_GE(stopped_at, 200);
  EXPECT_LT(stopped_at, steps) << out;
  EXPECT_NE(out.find("SIGINT received: training stops at step " + std::to_string(stopped_at) + " of 3000"),
            std::string::npos) << out;
  EXPECT_NE(out.find("--resume continues from it"), std::string::npos) << out;
  EXPECT_EQ(out.find("validation at step"), std::string::npos) << "no final validation after a stop\n" << out;
  auto r = train({cfg, "--resume", "--dump-final", (dir.path / "run-final").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(final_difference(dir, "run", "ref"), 0.0)
      << "the run stopped at step " << stopped_at << " and resumed ends with other weights";
}

TEST(Train, AKillDuringACheckpointWriteNeverLeavesABrokenCheckpoint) {
  TempDir dir;
  // A checkpoint every step: most kills land in or near a write.
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run", 100000, 1));
  const fs::path checkpoint = dir.path / "run" / "checkpoint.pt";
  for (int attempt = 0; attempt < 5; ++attempt) {
    {
      Child child({kLoomBinary, "train", cfg, attempt == 0 ? "--set=trainer.seed=0" : "--resume"},
                  {{"RANK", ""}, {"WORLD_SIZE", ""}});
      auto deadline = std::chrono::steady_clock::now() + 60s;
      while (!fs::exists(checkpoint) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(150 + 37 * attempt));
      ASSERT_TRUE(child.running());
      child.kill(SIGKILL);
      child.wait(10s);
    }
    // Whatever is at the checkpoint's path must be a whole checkpoint:
    // resuming from it for one more step works.
    auto r = train({cfg, "--resume", "--set", "trainer.max_steps=1", "--set", "trainer.checkpoint_every=0"}, 60s);
    EXPECT_EQ(r.exit_code, 0) << "attempt " << attempt << ": " << r.err;
    for (const auto& entry : fs::directory_iterator(dir.path / "run")) {
      EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << entry.path();
    }
  }
}

TEST(Train, ResumeWithoutACheckpointIsAUsageError) {
  TempDir dir;
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "none", 10, 0));
  auto r = train({cfg, "--resume"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no checkpoint at"), std::string::npos) << r.err;
}

TEST(Train, HelpTaskListsATasksOptionsAndRefusesAnUnknownTask) {
  auto r = train({"--help-task", "torchscript"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* option : {"module", "train", "validation", "inputs", "loss", "target", "jit_optimize"})
    EXPECT_NE(r.out.find(std::string("\n  ") + option + " "), std::string::npos) << option << "\n" << r.out;
  r = train({"--help-task", "mnist"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown task 'mnist'; valid tasks: charlm, digits, teacher, torchscript"), std::string::npos) << r.err;
}

struct BadConfig {
  const char* name;
  const char* toml;
  const char* expected;  // what the message must say (after "file:line: ")
  int line;
};

const BadConfig kBadConfigs[] = {
    {"unknown_key", "[trainer]\ntask = \"teacher\"\nmax_step = 10\n", "unknown key trainer.max_step; valid keys:", 3},
    {"wrong_type", "[trainer]\ntask = \"teacher\"\nmax_steps = \"ten\"\n", "trainer.max_steps must be an integer", 3},
    {"bad_choice", "[trainer]\ntask = \"teacher\"\n\noptimizer = \"lamb\"\n", "must be one of sgd, adam, adamw", 4},
    {"unknown_section", "[trainer]\ntask = \"teacher\"\n[trainr]\nx = 1\n", "unknown section [trainr]", 3},
    {"unknown_task", "[trainer]\ntask = \"mnist\"\n", "unknown task 'mnist'; valid tasks: charlm, digits, teacher", 2},
    {"unknown_task_option", "[trainer]\ntask = \"teacher\"\n[task]\nhiden = 3\n", "unknown option 'hiden'", 4},
    {"unknown_strategy", "[trainer]\ntask = \"teacher\"\n[strategy]\nname = \"fsdp\"\n", "valid choices: single (built in)", 0},
    {"unknown_plugin_option", "[trainer]\ntask = \"teacher\"\n[collective]\nname = \"mpi\"\n[collective.options]\nspeed = 3\n",
     "unknown option 'speed'", 0},
    {"syntax", "[trainer]\ntask = \"teacher\n", "", 2},
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class ConfigError : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ConfigError, ExitsWith2NamingFileLineAndKey) {
  const BadConfig& c = GetParam();
  TempDir dir;
  std::string toml = c.toml;
  auto cfg = dir.file("bad.toml", toml);
  auto r = train({cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  if (c.line > 0) {
    EXPECT_NE(r.err.find(cfg + ":" + std::to_string(c.line) + ":"), std::string::npos) << r.err;
  }
  EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Classes, ConfigError, ::testing::ValuesIn(kBadConfigs),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Train, SetOverridesAValue) {
  TempDir dir;
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run", 1000, 0));
  auto r = train({cfg, "--set", "trainer.max_steps=7", "--set", "trainer.log_every=7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("after 7 steps"), std::string::npos) << r.out;
  r = train({cfg, "--set", "trainer.max_steps=zero"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--set: trainer.max_steps must be an integer"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom::test
