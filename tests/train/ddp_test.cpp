// SPDX-License-Identifier: Apache-2.0
// The DDP strategy plugin through `loom train` under mpirun: N ranks with
// batch B end with the parameters of one process with batch N*B, and digits
// trains to the same accuracy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "dump_reader.hpp"
#include "train_support.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

ProcessResult run(std::vector<std::string> argv, std::chrono::seconds timeout = 120s) {
  return run_process(argv, kNoJob, timeout);
}

class DdpEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(DdpEquivalence, NRanksWithBatchBMatchOneProcessWithBatchNB) {
  const int ranks = GetParam(), batch = 16, steps = 20;
  TempDir dir;
  const std::string cfg = (dir.path / "teacher.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\nmax_steps = " << steps
                     << "\noptimizer = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nseed = 7\nthreads = 1\nlog_every = 10\n"
                        "[task]\nsamples = 2048\nhidden = 32\n";
  auto single = run({kLoomBinary, "train", cfg, "--set", "trainer.batch_size=" + std::to_string(batch * ranks), "--set",
                     "trainer.output_dir=\"" + (dir.path / "single").string() + "\"", "--dump-final",
                     (dir.path / "single-final").string(), "--dump-init", (dir.path / "init").string()});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  auto ddp = run(mpirun_loom(ranks, {"train", cfg, "--set", "trainer.batch_size=" + std::to_string(batch), "--set",
                                "strategy.name=\"ddp\"", "--set", "collective.name=\"mpi\"", "--set",
                                "trainer.output_dir=\"" + (dir.path / "ddp").string() + "\"", "--dump-final",
                                (dir.path / "ddp-final").string()}),
                 180s);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.out << ddp.err;
  EXPECT_NE(ddp.err.find("ddp over mpi, " + std::to_string(ranks) + " ranks"), std::string::npos) << ddp.err;
  auto a = read_params((dir.path / "ddp-final").string());
  auto b = read_params((dir.path / "single-final").string());
  // Per tensor, ||ddp - single|| / ||single||: summing gradients over ranks
  // rounds differently from summing one big batch, so single elements near
  // zero may differ more; whole tensors must agree to 1e-5.
  double diff = max_tensor_relative_difference(a, b);
  EXPECT_LE(diff, 1e-5) << "ddp on " << ranks << " ranks differs from single with batch " << batch * ranks;
  std::printf("ddp on %d ranks vs single: max per-tensor relative difference %.3g, max per-element %.3g\n", ranks, diff,
              max_relative_difference(a, b));
  // And the run really trained: the parameters moved from where they began.
  EXPECT_GT(max_tensor_relative_difference(b, read_params((dir.path / "init").string())), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpEquivalence, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(Ddp, DigitsReaches95PercentOnTwoRanks) {
  TempDir dir;
  const std::string cfg = (dir.path / "digits.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"digits\"\nmax_steps = 400\nbatch_size = 32\nlr = 0.002\n"
                        "schedule = \"cosine\"\nseed = 3\nlog_every = 100\noutput_dir = \""
                     << (dir.path / "run").string() << "\"\n[strategy]\nname = \"ddp\"\n[collective]\nname = \"mpi\"\n";
  auto t0 = std::chrono::steady_clock::now();
  auto r = run(mpirun_loom(2, {"train", cfg}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 60s);
  double accuracy = 0;
  auto at = r.out.find("final accuracy: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  accuracy = std::stod(r.out.substr(at + 16));
  EXPECT_GE(accuracy, 0.95);
  // Only rank 0 reports and writes the checkpoint.
  EXPECT_EQ(r.out.find("final accuracy: ", at + 1), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path / "run" / "checkpoint.pt"));
}

TEST(Ddp, AnUnknownCollectiveIsAUsageError) {
  TempDir dir;
  const std::string cfg = (dir.path / "t.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\n[strategy]\nname = \"ddp\"\n[strategy.options]\ncollective = \"nccl2\"\n";
  auto r = run({kLoomBinary, "train", cfg});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(cfg + ":6: strategy 'ddp' would use the collective plugin 'nccl2'"), std::string::npos) << r.err;
}

TEST(Ddp, MpiWithoutMpirunIsUnavailableWithTheFix) {
  TempDir dir;
  const std::string cfg = (dir.path / "t.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\nmax_steps = 2\n[strategy]\nname = \"ddp\"\n[collective]\nname = \"mpi\"\n";
  auto r = run_process({kLoomBinary, "launch", "-n", "2", "--", kLoomBinary, "train", cfg}, kNoJob, 60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("mpirun -np 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom::test
