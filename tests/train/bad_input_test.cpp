// SPDX-License-Identifier: Apache-2.0
// `loom train` under input an adversarial user would try: non-finite and
// out-of-range numbers, models larger than the machine, huge strings, and a
// resume into an empty metrics file. Each is refused with exit code 2 and a
// message naming file:line, the key and what would be valid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "train_support.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A quick teacher run; `extra` lines go at the end of [trainer] (line 4 on).
std::string teacher_config(const fs::path& out, const std::string& extra = "") {
  return "[trainer]\ntask = \"teacher\"\noutput_dir = \"" + out.string() + "\"\n" + extra +
         "[task]\nsamples = 256\n";
}

struct BadValue {
  const char* name;
  const char* line;      // a [trainer] line, placed at line 4
  const char* expected;  // what the message must say after "file:4: "
};

const BadValue kBadValues[] = {
    {"lr_nan", "lr = nan", "trainer.lr must be a finite number in [0, 1000], not floating-point nan"},
    {"lr_inf", "lr = inf", "trainer.lr must be a finite number in [0, 1000]"},
    {"lr_huge", "lr = 1e30", "trainer.lr must be a finite number in [0, 1000]"},
    {"grad_clip_nan", "grad_clip = nan", "trainer.grad_clip must be a finite number in [0, 1000000]"},
    {"momentum_inf", "momentum = inf", "trainer.momentum must be a finite number in [0, 1)"},
    {"momentum_one", "momentum = 1.0", "trainer.momentum must be a finite number in [0, 1)"},
    {"weight_decay_nan", "weight_decay = nan", "trainer.weight_decay must be a finite number in [0, 1000]"},
    {"threads_million", "threads = 1000000", "trainer.threads must be an integer in [0, "},
    {"accumulate_int64_max", "accumulate = 9223372036854775807", "trainer.accumulate must be an integer in [1, 65536]"},
    {"batch_size_huge", "batch_size = 16777217", "trainer.batch_size must be an integer in [1, 16777216]"},
    {"max_steps_huge", "max_steps = 1000000000000", "trainer.max_steps must be an integer in [1, 1000000000]"},
    {"warmup_steps_huge", "warmup_steps = 1000000001", "trainer.warmup_steps must be an integer in [0, 1000000000]"},
    {"log_every_zero", "log_every = 0", "trainer.log_every must be an integer in [1, 1000000000]"},
    {"val_every_negative", "val_every = -1", "trainer.val_every must be an integer in [0, 1000000000]"},
    {"checkpoint_every_huge", "checkpoint_every = 9223372036854775807",
     "trainer.checkpoint_every must be an integer in [0, 1000000000]"},
    {"seed_negative", "seed = -1", "trainer.seed must be an integer in [0, 9223372036854775807]"},
    {"device_junk", "device = \"cuda:zero\"", "trainer.device must be \"cpu\", \"cuda\" or \"cuda:N\""},
    {"on_nonfinite_unknown", "on_nonfinite = \"ignore\"", "trainer.on_nonfinite must be one of stop, skip_step"},
};

void PrintTo(const BadValue& c, std::ostream* os) { *os << c.name; }

class BadTrainerValue : public ::testing::TestWithParam<BadValue> {};

TEST_P(BadTrainerValue, ExitsWith2NamingTheRange) {
  const BadValue& c = GetParam();
  TempDir dir;
  auto cfg = dir.file("bad.toml", teacher_config(dir.path / "run", std::string(c.line) + "\n"));
  auto r = train({cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(cfg + ":4: " + c.expected), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path / "run")) << "refused at config time, before any output";
}

INSTANTIATE_TEST_SUITE_P(Ranges, BadTrainerValue, ::testing::ValuesIn(kBadValues),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BadInput, SetWithNanGoesThroughTheSameCheck) {
  TempDir dir;
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run"));
  for (const char* set : {"trainer.lr=nan", "trainer.momentum=-inf", "trainer.threads=1000000"}) {
    auto r = train({cfg, "--set", set});
    EXPECT_EQ(r.exit_code, 2) << set << ": " << r.err;
    EXPECT_NE(r.err.find("--set: trainer."), std::string::npos) << r.err;
  }
}

TEST(BadInput, ValuesAtTheEdgesOfTheRangesAreAccepted) {
  TempDir dir;
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run",
                                                 "max_steps = 3\naccumulate = 2\noptimizer = \"sgd\"\n"
                                                 "momentum = 0.999\nlr = 0\ngrad_clip = 1e6\nseed = 9223372036854775807\n"
                                                 "on_nonfinite = \"skip_step\"\n"));
  auto r = train({cfg});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

struct TooLarge {
  const char* name;
  const char* task;
  const char* options;   // the [task] section's body
  const char* expected;  // after "file:line: "
};

const TooLarge kTooLarge[] = {
    {"charlm_d_model", "charlm", "d_model = 100000\nheads = 1\n",
     "option 'd_model' for task 'charlm' is too large for this machine: with context = 64, d_model = 100000, "
     "layers = 2, heads = 1, ffn = 512 the task would need about "},
    {"charlm_d_model_int64_max", "charlm", "d_model = 9223372036854775807\nheads = 1\n",
     "option 'd_model' for task 'charlm' is too large for this machine"},
    {"charlm_context", "charlm", "context = 10000000\n", "option 'context' for task 'charlm' is too large"},
    {"teacher_samples", "teacher", "samples = 1000000000000000\n", "option 'samples' for task 'teacher' is too large"},
    {"teacher_inputs", "teacher", "inputs = 9223372036854775807\n", "option 'inputs' for task 'teacher' is too large"},
    {"digits_hidden", "digits", "hidden = 9223372036854775807\n", "option 'hidden' for task 'digits' is too large"},
};

void PrintTo(const TooLarge& c, std::ostream* os) { *os << c.name; }

class TaskTooLarge : public ::testing::TestWithParam<TooLarge> {};

TEST_P(TaskTooLarge, IsRefusedWithAnEstimateBeforeAllocating) {
  const TooLarge& c = GetParam();
  TempDir dir;
  auto text = dir.file("text.txt", std::string(4096, 'a'));
  auto cfg = dir.file("big.toml", "[trainer]\ntask = \"" + std::string(c.task) + "\"\noutput_dir = \"" +
                                      (dir.path / "run").string() + "\"\n[task]\n" + c.options +
                                      (std::string(c.task) == "charlm" ? "path = \"" + text + "\"\n" : ""));
  auto r = train({cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(cfg + ":5: " + c.expected), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" parameters, 16 bytes each with Adam, plus data); this machine has "), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Sizes, TaskTooLarge, ::testing::ValuesIn(kTooLarge),
                         [](const auto& info) { return std::string(info.param.name); });

struct HugeString {
  const char* name;
  std::string toml;  // {} stands for the 10 MB string
};

// Every message that quotes a user's value quotes a bounded excerpt of it.
TEST(BadInput, TenMegabyteStringsGiveShortMessages) {
  const std::string huge(10 << 20, 'x');
  const std::vector<HugeString> cases = {
      {"trainer.optimizer", "[trainer]\ntask = \"teacher\"\noptimizer = \"{}\"\n"},
      {"trainer.task", "[trainer]\ntask = \"{}\"\n"},
      {"trainer key", "[trainer]\ntask = \"teacher\"\n{} = 1\n"},
      {"section", "[trainer]\ntask = \"teacher\"\n[{}]\n"},
      {"trainer.output_dir", "[trainer]\ntask = \"teacher\"\noutput_dir = \"{}\"\n"},
      {"task.path", "[trainer]\ntask = \"charlm\"\n[task]\npath = \"{}\"\n"},
      {"task key", "[trainer]\ntask = \"teacher\"\n[task]\n{} = 1\n"},
      {"strategy.name", "[trainer]\ntask = \"teacher\"\n[strategy]\nname = \"{}\"\n"},
      {"collective.name", "[trainer]\ntask = \"teacher\"\n[collective]\nname = \"{}\"\n"},
      {"strategy option value", "[trainer]\ntask = \"teacher\"\n[strategy]\nname = \"ddp\"\n[strategy.options]\n"
                                "timeout_ms = \"{}\"\n"},
      {"strategy option key", "[trainer]\ntask = \"teacher\"\n[strategy]\nname = \"ddp\"\n[strategy.options]\n{} = 1\n"},
      {"strategy's collective", "[trainer]\ntask = \"teacher\"\n[strategy]\nname = \"ddp\"\n[strategy.options]\n"
                                "collective = \"{}\"\n"},
  };
  TempDir dir;
  for (const auto& c : cases) {
    std::string toml = c.toml;
    toml.replace(toml.find("{}"), 2, huge);
    auto cfg = dir.file("huge.toml", toml);
    auto r = train({cfg});
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err.substr(0, 2000);
    EXPECT_LT(r.err.size(), 4096u) << c.name << ": " << r.err.substr(0, 2000);
  }
  // A command-line argument is at most 128 KiB (MAX_ARG_STRLEN).
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run"));
  auto r = train({cfg, "--set", "trainer.optimizer=" + std::string(100000, 'x')});
  EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 2000);
  EXPECT_LT(r.err.size(), 4096u) << r.err.substr(0, 2000);
  EXPECT_NE(r.err.find("xxx... (100002 bytes)"), std::string::npos) << r.err.substr(0, 2000);
}

std::string first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// A run killed before metrics.csv was first flushed leaves it empty (or
// absent); the resumed run still starts it with the header.
TEST(BadInput, ResumeIntoAnEmptyOrMissingMetricsFileWritesTheHeader) {
  TempDir dir;
  auto cfg = dir.file("run.toml", teacher_config(dir.path / "run", "max_steps = 4\nlog_every = 1\n"));
  auto r = train({cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path metrics = dir.path / "run" / "metrics.csv";
  ASSERT_EQ(first_line(metrics), "step,elapsed_s,metric,value");

  std::ofstream(metrics, std::ios::trunc).close();
  r = train({cfg, "--resume", "--set", "trainer.max_steps=6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(first_line(metrics), "step,elapsed_s,metric,value");

  fs::remove(metrics);
  r = train({cfg, "--resume", "--set", "trainer.max_steps=8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(first_line(metrics), "step,elapsed_s,metric,value");

  // A file that has its header keeps exactly one.
  r = train({cfg, "--resume", "--set", "trainer.max_steps=9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(metrics);
  int headers = 0;
  for (std::string line; std::getline(in, line);) headers += line == "step,elapsed_s,metric,value";
  EXPECT_EQ(headers, 1);
}

}  // namespace
}  // namespace loom::test
