// SPDX-License-Identifier: Apache-2.0
// The NCCL plugin as users meet it on a machine without a usable GPU (CI):
// it loads, `loom plugins` lists it as unavailable with CUDA's reason, `info`
// describes it, and a training job that picks it stops with exit code 2 and
// that reason. On a machine where NCCL is usable these expectations do not
// hold, so every test skips there.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "../support/subprocess.hpp"
#include "../train/train_support.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

using json = nlohmann::json;

// Outside any job, with only the build tree's plugins.
const std::map<std::string, std::string> kAlone = {
    {"RANK", ""}, {"WORLD_SIZE", ""}, {"MASTER_ADDR", ""}, {"LOOM_PLUGIN_PATH", ""}};

// What init says on a machine without a working CUDA device, whatever CUDA's
// own words (no driver, an old driver, no device).
const char* const kReasonStart = "no usable CUDA device: cudaGetDeviceCount: ";

// The nccl entry of `loom plugins --json`, or null when it is missing.
json nccl_record(std::string* diagnostics) {
  auto r = run_process({kLoomBinary, "plugins", "--json"}, kAlone);
  *diagnostics = "exit " + std::to_string(r.exit_code) + "\n" + r.out + r.err;
  if (r.exit_code != 0) return nullptr;
  json listing = json::parse(r.out, nullptr, false);
  if (!listing.is_object() || !listing.contains("plugins")) return nullptr;
  for (const auto& p : listing["plugins"])
    if (p.value("name", "") == "nccl" && p.value("kind", "") == "collective") return p;
  return nullptr;
}

bool has_gpu_device_nodes() {
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;  // Linux, WSL2
}

// Skips the test where NCCL really is usable; there the plugin must say ok.
#define SKIP_WHERE_NCCL_WORKS()                                                                                    \
  do {                                                                                                             \
    std::string diag_;                                                                                             \
    const json rec_ = nccl_record(&diag_);                                                                         \
    ASSERT_TRUE(rec_.is_object()) << "no nccl collective in `loom plugins --json`:\n" << diag_;                    \
    if (rec_.value("state", "") == "ok") {                                                                         \
      ASSERT_TRUE(has_gpu_device_nodes())                                                                          \
          << "nccl says it is usable, but this machine has no NVIDIA device node (/dev/nvidiactl)";                \
      GTEST_SKIP() << "nccl is usable on this machine (CUDA device and driver present); these tests cover the "    \
                      "machine without one";                                                                       \
    }                                                                                                              \
  } while (0)

TEST(NcclPlugin, ListedAsUnavailableWithTheCudaReason) {
  SKIP_WHERE_NCCL_WORKS();
  auto r = run_process({kLoomBinary, "plugins"}, kAlone);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Columns are padded to the longest path: any run of spaces before the status.
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(std::string("libnccl_collective\\.so +unavailable: ") + kReasonStart + "\\S")))
      << r.out;
  // The other plugins are still listed: the unavailable one did not stop the listing.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("libmpi_collective\\.so +ok"))) << r.out;
}

TEST(NcclPlugin, InfoShowsItsDescriptorAndTheReason) {
  SKIP_WHERE_NCCL_WORKS();
  auto r = run_process({kLoomBinary, "plugins", "info", "nccl"}, kAlone);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Name:         nccl\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Kind:         collective\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Capabilities: cuda-memory, async-progress, abort, peer-failure, scaled-allreduce\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(std::string("Status:       unavailable: ") + kReasonStart), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("timeout_ms"), std::string::npos) << r.out;
}

TEST(NcclPlugin, JsonListingCarriesTheStateAndReason) {
  SKIP_WHERE_NCCL_WORKS();
  std::string diag;
  const json rec = nccl_record(&diag);
  ASSERT_TRUE(rec.is_object()) << diag;
  EXPECT_EQ(rec.value("state", ""), "unavailable") << rec.dump(2);
  EXPECT_EQ(rec.value("reason", "").rfind(kReasonStart, 0), 0u) << rec.dump(2);
  EXPECT_EQ(rec.value("status", ""), "unavailable: " + rec.value("reason", "")) << rec.dump(2);
  // Loaded and negotiated: the descriptor is there although init refused.
  EXPECT_EQ(rec.value("abi", json()).is_string(), true) << rec.dump(2);
  ASSERT_TRUE(rec.contains("capabilities")) << rec.dump(2);
  const auto caps = rec["capabilities"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(caps.begin(), caps.end(), "cuda-memory"), caps.end()) << rec.dump(2);
  EXPECT_EQ(std::find(caps.begin(), caps.end(), "host-memory"), caps.end()) << rec.dump(2);
}

TEST(NcclPlugin, DdpTrainingOnNcclExitsTwoWithTheReason) {
  SKIP_WHERE_NCCL_WORKS();
  TempDir dir("loom-nccl");
  const std::string cfg = dir.file("t.toml", "[trainer]\ntask = \"teacher\"\nmax_steps = 2\noutput_dir = \"" +
                                                 (dir.path / "run").string() +
                                                 "\"\n[strategy]\nname = \"ddp\"\n[strategy.options]\n"
                                                 "collective = \"nccl\"\n");
  auto r = run_process({kLoomBinary, "train", cfg}, kAlone, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(std::string("loom: error: collective plugin 'nccl' \\(\\S*libnccl_collective\\.so\\) is "
                                    "unavailable here: ") +
                        kReasonStart)))
      << r.err;
  EXPECT_EQ(r.signal, 0) << r.err;
}

TEST(NcclPlugin, CheckIsAUsageErrorWithTheReason) {
  SKIP_WHERE_NCCL_WORKS();
  auto r = run_process({kLoomBinary, "plugins", "check", "nccl"}, kAlone);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(std::string("libnccl_collective.so) is unavailable here: ") + kReasonStart), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace loom::test
