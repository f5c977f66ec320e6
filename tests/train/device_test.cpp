// SPDX-License-Identifier: Apache-2.0
// trainer.device: a run on a CUDA device where this process cannot have one
// is a configuration error (exit 2) that says why and what is valid, before
// any output. Where LibTorch has CUDA and a device is visible, a "cuda" run
// trains and says where; the refusals below then apply to devices that do
// not exist.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_paths.hpp"
#include "train_support.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

std::string teacher_config(const fs::path& out, const std::string& device) {
  return "[trainer]\ntask = \"teacher\"\noutput_dir = \"" + out.string() + "\"\ndevice = \"" + device +
         "\"\nmax_steps = 5\n[task]\nsamples = 256\n";
}

// Why this process cannot train on CUDA, as loom says it, or "" when it can.
std::string cuda_refusal(const ProcessResult& r) {
  for (const char* why : {"but this LibTorch was built without CUDA", "but no CUDA device is visible to this process"})
    if (r.err.find(why) != std::string::npos) return why;
  return "";
}

TEST(Device, CudaWithoutCudaExits2SayingWhyBeforeAnyOutput) {
  TempDir dir;
  const std::string cfg = dir.file("cuda.toml", teacher_config(dir.path / "run", "cuda"));
  const ProcessResult r = train({cfg});
  if (r.exit_code == 0) {
    EXPECT_NE(r.err.find("training on cuda:0"), std::string::npos) << r.err;
    GTEST_SKIP() << "this LibTorch has CUDA and a device: the refusal does not apply here";
  }
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(cfg + ": trainer.device = \"cuda\""), std::string::npos) << r.err;
  EXPECT_NE(cuda_refusal(r), "") << r.err;
  EXPECT_NE(r.err.find("valid here: \"cpu\""), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path / "run")) << "refused before any output";
}

TEST(Device, ADeviceThatDoesNotExistExits2NamingTheDevicesThereAre) {
  TempDir dir;
  const std::string cfg = dir.file("cuda.toml", teacher_config(dir.path / "run", "cuda:4096"));
  const ProcessResult r = train({cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(cfg + ": trainer.device = \"cuda:4096\""), std::string::npos) << r.err;
  if (cuda_refusal(r).empty()) {  // CUDA is there: the index is what is wrong
    EXPECT_NE(r.err.find("device 4096 does not exist; this process sees"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir.path / "run"));
}

TEST(Device, TheCpuIsTheDefaultAndNeedsNoCuda) {
  TempDir dir;
  const std::string cfg = dir.file("cpu.toml", teacher_config(dir.path / "run", "cpu"));
  const ProcessResult r = train({cfg});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("training on cuda"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom::test
