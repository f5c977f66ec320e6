// SPDX-License-Identifier: Apache-2.0
// The memory estimates of the built-in tasks: their parameter counts match
// the models the tasks build, and the check refuses what a machine cannot hold.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "memory_estimate.hpp"

namespace loom::train::tasks {
namespace {

TaskOptions with(std::map<std::string, std::string> values) {
  TaskOptions result;
  for (const auto& [key, value] : values) {
    result.values[key] = value;
    result.sources[key] = "run.toml:" + std::to_string(10 + result.values.size());
  }
  return result;
}

Options options_of(const std::string& task, const TaskOptions& raw) { return Options(task, raw, task_options(task)); }

double built_parameters(const std::string& task, const TaskOptions& raw) {
  auto built = make_task(task, raw, 0);
  double n = 0;
  for (const auto& [name, p] : built->parameters()) n += static_cast<double>(p.numel());
  return n;
}

std::string text_file() {
  std::string path = ::testing::TempDir() + "loom_memory_" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << std::string(2000, 'a');
  return path;
}

TEST(MemoryEstimate, ParameterCountsMatchTheBuiltModels) {
  const std::string text = text_file();
  for (auto raw : {with({{"path", text}}), with({{"path", text}, {"context", "16"}, {"d_model", "48"}, {"layers", "3"},
                                                 {"heads", "3"}, {"ffn", "100"}})}) {
    EXPECT_EQ(estimate_charlm(options_of("charlm", raw)).parameters, built_parameters("charlm", raw));
  }
  for (auto raw : {with({}), with({{"inputs", "5"}, {"hidden", "7"}, {"samples", "100"}})}) {
    EXPECT_EQ(estimate_teacher(options_of("teacher", raw)).parameters, built_parameters("teacher", raw));
  }
  if (std::ifstream(options_of("digits", {}).text("path")).good()) {
    for (auto raw : {with({}), with({{"hidden", "9"}})}) {
      EXPECT_EQ(estimate_digits(options_of("digits", raw)).parameters, built_parameters("digits", raw));
    }
  }
}

TEST(MemoryEstimate, RefusesWhatTheMachineCannotHoldNamingTheOption) {
  auto options = options_of("teacher", with({{"samples", "100000"}}));
  MemoryEstimate estimate = estimate_teacher(options);  // about 33 MB of data
  try {
    check_memory(options, estimate, 1 << 20);
    FAIL() << "a 1 MB machine took a 33 MB task";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), Error::kUsage);
    EXPECT_NE(std::string(e.what()).find("run.toml:11: option 'samples' for task 'teacher' is too large for this "
                                         "machine: with inputs = 16, hidden = 32, samples = 100000 the task would "
                                         "need about 33 MB"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("this machine has 1 MB"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_memory(options, estimate, uint64_t{1} << 30));
  EXPECT_NO_THROW(check_memory(options, estimate, 0)) << "unknown memory: no check";
}

TEST(MemoryEstimate, MachineMemoryIsReadFromProcMeminfo) {
  EXPECT_GT(machine_memory_bytes(), uint64_t{64} << 20);
}

}  // namespace
}  // namespace loom::train::tasks
