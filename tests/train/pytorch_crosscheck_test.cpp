// SPDX-License-Identifier: Apache-2.0
// Cross-check against PyTorch itself (Debian's python3-torch): the teacher
// task trained for 10 steps by `loom train` and by PyTorch from the same
// initial weights, data and sample order ends with the same weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../support/subprocess.hpp"
#include "dump_reader.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class PytorchCrossCheck : public ::testing::TestWithParam<std::string> {};

TEST_P(PytorchCrossCheck, TeacherTenStepsMatchWithin1e5) {
  const std::string optimizer = GetParam();
  char tmpl[] = "/tmp/loom-xcheck-XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  const std::string cfg = (dir / "teacher.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\nmax_steps = 10\nbatch_size = 32\noptimizer = \"" << optimizer
                     << "\"\nlr = 0.01\nmomentum = 0.9\nseed = 11\nthreads = 1\noutput_dir = \"" << (dir / "run").string()
                     << "\"\n[task]\nsamples = 1024\n";
  auto r = run_process({kLoomBinary, "train", cfg, "--dump-init", (dir / "init").string(), "--dump-final",
                        (dir / "loom").string()},
                       {{"RANK", ""}, {"WORLD_SIZE", ""}}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_process({"/usr/bin/python3", kTeacherPytorchScript, (dir / "init").string(), (dir / "pytorch").string()}, {},
                  300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto loom_final = read_params((dir / "loom").string());
  auto torch_final = read_params((dir / "pytorch").string());
  double diff = max_relative_difference(loom_final, torch_final);
  EXPECT_LE(diff, 1e-5) << "loom and PyTorch disagree after 10 " << optimizer << " steps";
  EXPECT_GT(max_tensor_relative_difference(loom_final, read_params((dir / "init").string())), 1e-4) << "nothing trained";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PytorchCrossCheck, ::testing::Values("sgd", "adam", "adamw"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom::test
