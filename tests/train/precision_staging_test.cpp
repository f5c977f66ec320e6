// SPDX-License-Identifier: Apache-2.0
// trainer.precision = "bf16" (autocast) and trainer.host_staging, on the
// CPU: bf16 changes what is computed and still trains; a strategy lent
// host copies of the state (what a swarm peer on a GPU gets) ends where it
// ends when lent the state itself, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "dump_reader.hpp"
#include "test_paths.hpp"
#include "train_support.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string teacher_config(const fs::path& out, const std::string& extra) {
  return "[trainer]\ntask = \"teacher\"\noutput_dir = \"" + out.string() +
         "\"\nmax_steps = 30\nbatch_size = 16\noptimizer = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nseed = 5\n"
         "threads = 1\nlog_every = 10\n" +
         extra + "[task]\nsamples = 1024\nhidden = 32\n";
}

TEST(Precision, Bf16ComputesInBfloat16AndStillTrains) {
  TempDir dir;
  const std::string fp32 = dir.file("fp32.toml", teacher_config(dir.path / "fp32", ""));
  const std::string bf16 = dir.file("bf16.toml", teacher_config(dir.path / "bf16", "precision = \"bf16\"\n"));
  const ProcessResult a = train({fp32, "--dump-final", dir / "fp32-final", "--dump-init", dir / "init"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const ProcessResult b = train({bf16, "--dump-final", dir / "bf16-final"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("precision bf16: the forward pass runs under autocast on cpu"), std::string::npos) << b.err;
  const auto init = read_params(dir / "init"), p32 = read_params(dir / "fp32-final"), p16 = read_params(dir / "bf16-final");
  // Autocast really ran: bfloat16 products (8-bit mantissas) end elsewhere
  // than fp32 ones, yet near them (both trained from the same start).
  const double apart = max_tensor_relative_difference(p16, p32);
  const double moved = max_tensor_relative_difference(p32, init);
  EXPECT_GT(apart, 1e-4) << "bf16 and fp32 runs ended on the same parameters: autocast did not apply";
  EXPECT_LT(apart, 0.5 * moved) << "bf16 went far from fp32 (fp32 moved " << moved << " from the start)";
  const double loss32 = final_metric(a.out, "loss"), loss16 = final_metric(b.out, "loss");
  ASSERT_TRUE(std::isfinite(loss32) && std::isfinite(loss16)) << a.out << b.out;
  EXPECT_LT(std::abs(loss16 - loss32), 0.1 * std::abs(loss32) + 1e-3) << "fp32 loss " << loss32 << ", bf16 " << loss16;
  // Parameters, gradients and the optimizer stay fp32.
  EXPECT_EQ(p16.size(), p32.size());
}

TEST(Precision, AnUnknownPrecisionExits2NamingTheChoices) {
  TempDir dir;
  const std::string cfg = dir.file("fp16.toml", teacher_config(dir.path / "run", "precision = \"fp16\"\n"));
  const ProcessResult r = train({cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("trainer.precision"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bf16"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path / "run"));
}

// ddp averages the gradients in the host copies and the trainer copies them
// back; any copy missed (after setup's broadcast, after the averaging)
// would change the result.
TEST(HostStaging, DdpOnHostCopiesEndsOnTheSameParametersBitForBit) {
  TempDir dir;
  const std::string cfg = dir.file("ddp.toml", teacher_config(dir.path / "run", "") +
                                                   "[strategy]\nname = \"ddp\"\n[collective]\nname = \"mpi\"\n");
  const ProcessResult direct = run_process(
      mpirun_loom(2, {"train", cfg, "--set", "trainer.output_dir=\"" + (dir / "direct") + "\"", "--dump-final",
                      dir / "direct-final"}),
      kNoJob, 180s);
  ASSERT_EQ(direct.exit_code, 0) << direct.out << direct.err;
  EXPECT_EQ(direct.err.find("works on host memory"), std::string::npos) << direct.err;
  const ProcessResult staged = run_process(
      mpirun_loom(2, {"train", cfg, "--set", "trainer.host_staging=\"always\"", "--set",
                      "trainer.output_dir=\"" + (dir / "staged") + "\"", "--dump-final", dir / "staged-final"}),
      kNoJob, 180s);
  ASSERT_EQ(staged.exit_code, 0) << staged.out << staged.err;
  EXPECT_NE(staged.err.find("strategy ddp works on host memory: the state's"), std::string::npos) << staged.err;
  const auto a = read_params(dir / "direct-final"), b = read_params(dir / "staged-final");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(max_relative_difference(a, b), 0.0);
}

TEST(HostStaging, AnUnknownModeExits2) {
  TempDir dir;
  const std::string cfg = dir.file("bad.toml", teacher_config(dir.path / "run", "host_staging = \"never\"\n"));
  const ProcessResult r = train({cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("trainer.host_staging"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("always"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom::test
