// SPDX-License-Identifier: Apache-2.0
// `loom plugins check NAME|PATH [-n N] [--op ...]`: the conformance kit as
// vendors run it, against the real `loom` binary. A collective gets a table
// by rule, operation and dtype, and exit code 0 only when nothing failed; a
// plugin that computes a wrong result fails with its rule named; bad
// arguments are usage errors (exit 2) naming what would be valid; a
// strategy is checked by a short real run on several processes.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

// The table's rows, split into words: RULE OPERATION DTYPE PASSED FAILED SKIPPED NOTE...
std::vector<std::vector<std::string>> rows(const std::string& out) {
  std::vector<std::vector<std::string>> table;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    if (row.size() >= 6) table.push_back(row);
  }
  return table;
}

std::map<std::string, std::string> env_with(const std::string& dirs) {
  return {{"LOOM_PLUGIN_PATH", dirs}, {"RANK", ""}, {"WORLD_SIZE", ""}, {"MASTER_ADDR", ""}, {"MASTER_PORT", ""}};
}

TEST(CheckCommand, PathToAPluginFileRunsTheKitOnIt) {
  const std::string path = std::string(kGoodPluginDir) + "/libgood_collective.so";
  auto r = run_process({kLoomBinary, "plugins", "check", path, "--op", "broadcast"}, env_with("/nonexistent"),
                       std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Broadcast.Exact"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Allreduce.Exact"), std::string::npos) << "--op broadcast ran allreduce's cases\n" << r.out;
  EXPECT_NE(r.out.find("ErrorOrder.InvalidBeforeAborted"), std::string::npos) << "general rules run with --op\n"
                                                                               << r.out;
  EXPECT_NE(r.out.find("passed: collective 'good'"), std::string::npos) << r.out;
}

TEST(CheckCommand, WrongResultFailsNamingTheRule) {
  auto r = run_process({kLoomBinary, "plugins", "check", "wrongsum", "--op", "allreduce"}, env_with(kBrokenPluginDir),
                       std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAILED: collective 'wrongsum'"), std::string::npos) << r.out;
  // The table's Allreduce.Exact rows count the failures.
  int failing_rows = 0;
  for (const auto& row : rows(r.out))
    if (row[0] == "Allreduce.Exact" && row[4] != "0") ++failing_rows;
  EXPECT_GT(failing_rows, 0) << r.out;
}

TEST(CheckCommand, BadArgumentsAreUsageErrors) {
  const auto env = env_with(kGoodPluginDir);
  auto r = run_process({kLoomBinary, "plugins", "check", "good", "--op", "gather"}, env);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--op gather is not an operation; valid: allreduce, broadcast"), std::string::npos) << r.err;
  r = run_process({kLoomBinary, "plugins", "check", "/nonexistent/libx_collective.so"}, env);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no plugin file /nonexistent/libx_collective.so"), std::string::npos) << r.err;
  const fs::path odd = fs::temp_directory_path() / "loom-check-odd.so";
  fs::copy_file(std::string(kGoodPluginDir) + "/libgood_collective.so", odd, fs::copy_options::overwrite_existing);
  r = run_process({kLoomBinary, "plugins", "check", odd.string()}, env);
  fs::remove(odd);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("lib<name>_<kind>.so"), std::string::npos) << r.err;
  r = run_process({kLoomBinary, "plugins", "check", "good", "-n", "0"}, env);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-n wants at least 1 process"), std::string::npos) << r.err;
}

TEST(CheckCommand, UcxOnTwoProcesses) {
  auto r = run_process({kLoomBinary, "plugins", "check", "ucx", "-n", "2", "--op", "allreduce"},
                       env_with(kBuildPluginDir), std::chrono::seconds(300));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on 2 process(es)"), std::string::npos) << r.out;
  std::set<std::string> passed;  // dtypes with Allreduce.Exact rows that passed and failed nothing
  for (const auto& row : rows(r.out))
    if (row[0] == "Allreduce.Exact" && row[1] == "allreduce" && row[3] != "0" && row[4] == "0") passed.insert(row[2]);
  EXPECT_EQ(passed, (std::set<std::string>{"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"})) << r.out;
}

TEST(CheckCommand, StrategyRunsItsHooksOnTwoProcesses) {
  auto r = run_process({kLoomBinary, "plugins", "check", "ddp", "-n", "2", "--option", "collective=ucx"},
                       env_with(kBuildPluginDir), std::chrono::seconds(300));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("hooks in order (training run)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("passed: strategy 'ddp'"), std::string::npos) << r.out;
  // A strategy that cannot run there fails, saying so.
  r = run_process({kLoomBinary, "plugins", "check", "ddp", "-n", "2", "--option", "collective=nosuch"},
                  env_with(kBuildPluginDir), std::chrono::seconds(300));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("FAILED: strategy 'ddp'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace loom::test
