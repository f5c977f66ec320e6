// SPDX-License-Identifier: Apache-2.0
// The torchscript task under bad input: each wrong model or data file, and
// each non-finite loss, gets exit code 2 (or 1 for a run that diverged) and
// a message naming the file and what would be valid; never a crash.
#include <gtest/gtest.h>

#include "own_model.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

using namespace std::chrono_literals;

// Every bad file of the cases below, written by one Python run.
std::string bad_files(std::string* why) {
  static const std::string code = R"(
import sys, torch
d = sys.argv[1]
torch.jit.script(torch.nn.Linear(4, 3)).save(d + "/linear.pt")
torch.save(torch.nn.Linear(4, 3).state_dict(), d + "/state_dict.pt")
open(d + "/text.pt", "w").write("not a model\n")
x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
torch.save({"x": x, "y": y}, d + "/good.pt")
torch.save({"x": x}, d + "/no_y.pt")
torch.save({"x": x, "y": y[:60]}, d + "/short_y.pt")
torch.save({"x": x, "y": y.float()}, d + "/float_y.pt")
torch.save({"x": torch.randn(64, 7), "y": y}, d + "/wide_x.pt")
torch.save({"x": x, "y": y}, d + "/legacy.pt", _use_new_zipfile_serialization=False)
torch.save([x, y], d + "/list.pt")
bad = x.clone(); bad[::8] = float("nan")
torch.save({"x": bad, "y": y}, d + "/some_nan.pt")
torch.save({"x": torch.full((64, 4), float("nan")), "y": y}, d + "/all_nan.pt")
import os; os.makedirs(d + "/empty_folder")
with open(d + "/huge.pt", "wb") as f: f.truncate(1 << 40)  # sparse: a terabyte that takes no disk
)";
  return cached_test_data("own-model-bad", code, [](const std::string& dir) -> std::string {
    auto r = run_python(code, {dir});
    return r.exit_code == 0 ? "" : "writing the bad files failed: " + r.err;
  }, why);
}

struct BadCase {
  const char* name;
  const char* module;  // file names in bad_files()
  const char* train;
  const char* task_lines;  // extra [task] lines
  int exit_code;
  const char* expect;  // in stderr
};

const BadCase kCases[] = {
    {"ModuleIsAStateDict", "state_dict.pt", "good.pt", "", 2, "not a TorchScript module; save the model in Python with torch.jit.script(model).save(path)"},
    {"ModuleIsText", "text.pt", "good.pt", "", 2, "which is not a TorchScript file"},
    {"ModuleIsMissing", "nowhere.pt", "good.pt", "", 2, "which is not a file"},
    {"DataIsTheModule", "linear.pt", "linear.pt", "", 2, "is a TorchScript module, not data"},
    {"DataLacksTheTarget", "linear.pt", "no_y.pt", "", 2, "has no field 'y'; its fields are: x"},
    {"FieldsDifferInSamples", "linear.pt", "short_y.pt", "", 2, "differ in their first dimension (samples): 'x' has 64, 'y' has 60"},
    {"TargetDtypeDoesNotFitTheLoss", "linear.pt", "float_y.pt", "", 2, "loss cross_entropy needs integer class indices"},
    {"MseNeedsAFloatTarget", "linear.pt", "good.pt", "loss = \"mse\"\n", 2, "loss mse needs a floating-point target"},
    {"ForwardFailsOnTheFirstBatch", "linear.pt", "wide_x.pt", "", 2, "the module's forward failed on the first batch (inputs: x)"},
    {"LegacyTorchSave", "linear.pt", "legacy.pt", "", 2, "torch.save's legacy format"},
    {"DataIsNotADict", "linear.pt", "list.pt", "", 2, "not a dict of tensors"},
    {"DataLargerThanMemory", "linear.pt", "huge.pt", "", 2, "split it into shard files in a folder"},
    {"ShardFolderIsEmpty", "linear.pt", "empty_folder", "", 2, "holds no shard files (*.pt)"},
    {"UnknownLoss", "linear.pt", "good.pt", "loss = \"hinge\"\n", 2, "must be one of cross_entropy, mse, bce_with_logits, module"},
    {"UnknownField", "linear.pt", "good.pt", "inputs = [\"pixels\"]\n", 2, "has no field 'pixels'"},
};

// Test names say what a case is; gtest prints the case by its name too.
void PrintTo(const BadCase& c, std::ostream* out) { *out << c.name; }

class OwnModelBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(OwnModelBadInput, ExitsWithAMessageNamingTheFileAndWhatIsValid) {
  const BadCase& c = GetParam();
  std::string why;
  const std::string files = bad_files(&why);
  ASSERT_FALSE(files.empty()) << why;
  TempDir dir;
  const std::string cfg = write_config(
      dir / "bad.toml", std::string("[trainer]\ntask = \"torchscript\"\nmax_steps = 5\nbatch_size = 8\noutput_dir = \"") +
                            dir / "run" + "\"\n[task]\nmodule = \"" + files + "/" + c.module + "\"\ntrain = \"" + files +
                            "/" + c.train + "\"\n" + c.task_lines);
  auto r = run_process({kLoomBinary, "train", cfg}, kNoJob, 60s);
  EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
  EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Files, OwnModelBadInput, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// -- Non-finite losses ---------------------------------------------------------

class OwnModelNonFinite : public ::testing::Test {
 protected:
  ProcessResult run(const std::string& data, const std::string& policy) {
    std::string why;
    const std::string files = bad_files(&why);
    EXPECT_FALSE(files.empty()) << why;
    const std::string cfg = write_config(
        dir_ / "nan.toml", "[trainer]\ntask = \"torchscript\"\nmax_steps = 40\nbatch_size = 8\nseed = 1\n"
                           "on_nonfinite = \"" + policy + "\"\noutput_dir = \"" + dir_ / "run" +
                               "\"\n[task]\nmodule = \"" + files + "/linear.pt\"\ntrain = \"" + files + "/" + data +
                               "\"\nvalidation = \"" + files + "/good.pt\"\n");
    return run_process({kLoomBinary, "train", cfg}, kNoJob, 60s);
  }
  TempDir dir_;
};

TEST_F(OwnModelNonFinite, StopEndsTheRunWithExit1NamingTheStep) {
  auto r = run("some_nan.pt", "stop");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(": the loss or the gradients are not finite (inf or nan); the run stops"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step "), std::string::npos) << r.err;
}

TEST_F(OwnModelNonFinite, SkipStepDropsTheBadStepsAndTrainsOn) {
  auto r = run("some_nan.pt", "skip_step");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the step is dropped (on_nonfinite = \"skip_step\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("steps were dropped for a non-finite loss or gradients"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("final accuracy: "), std::string::npos) << r.out;
}

TEST_F(OwnModelNonFinite, SkipStepGivesUpWhenNothingIsFinite) {
  auto r = run("all_nan.pt", "skip_step");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("25 steps in a row had a non-finite loss or gradients"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom::test
