// SPDX-License-Identifier: Apache-2.0
// `loom bench collective` under `loom launch`, with its buffers in ordinary
// pages and in huge pages (--huge-pages, as Loom's gradient buffers are):
// every size's validated run must hold the right sums, on both sides of the
// 2 MiB huge-page size, and the JSON says which buffers were used.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

using namespace std::chrono_literals;

class BenchCollective : public testing::TestWithParam<bool> {};

TEST_P(BenchCollective, EverySizeHoldsTheRightResult) {
  const bool huge = GetParam();
  if (!std::filesystem::exists(std::string(kBuildPluginDir) + "/libucx_collective.so"))
    GTEST_SKIP() << "the ucx plugin is not built here";
  const std::string json = testing::TempDir() + "/bench_" + (huge ? "huge" : "plain") + ".json";
  for (const char* op : {"allreduce", "reduce_scatter"}) {
    std::vector<std::string> argv = {kLoomBinary, "launch", "-n", "2", "--", kLoomBinary, "bench", "collective",
                                     "--plugin", "ucx", "--op", op, "--min-bytes", "1048576", "--max-bytes",
                                     "8388608", "--iters", "2", "--warmup", "1", "--json", json};
    if (huge) argv.push_back("--huge-pages");
    auto r = run_process(argv, {}, 120s);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    std::ifstream in(json);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    EXPECT_NE(s.find(std::string("\"huge_pages\": ") + (huge ? "true" : "false")), std::string::npos) << s;
    size_t rows = 0, valid = 0;
    for (size_t at = s.find("\"valid\""); at != std::string::npos; at = s.find("\"valid\"", at + 1)) {
      ++rows;
      const std::string good = "\"valid\": true";
      valid += s.compare(at, good.size(), good) == 0;
    }
    EXPECT_EQ(rows, 4u) << op << ": 1, 2, 4 and 8 MiB\n" << s;
    EXPECT_EQ(valid, rows) << op << "\n" << s;
  }
}

INSTANTIATE_TEST_SUITE_P(, BenchCollective, testing::Bool(), [](const testing::TestParamInfo<bool>& info) {
  return std::string(info.param ? "HugePages" : "OrdinaryPages");
});

}  // namespace
}  // namespace loom::test
