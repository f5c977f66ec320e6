// SPDX-License-Identifier: Apache-2.0
// Helpers for tests that run `loom train` as a user would: scratch folders,
// configs, the environment of a process outside any launcher, mpirun, and
// readers for what a run prints and writes.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../support/subprocess.hpp"

namespace loom::test {

// A fresh folder under /tmp, removed at destruction.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* tag = "loom-train");
  ~TempDir();
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // Writes text to the file `name` in this folder; returns its path.
  std::string file(const std::string& name, const std::string& text) const;
};

// The environment of a process outside any launcher's job.
extern const std::map<std::string, std::string> kNoJob;

// `loom train ARGS` outside any job.
ProcessResult train(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(120));

// Writes text to path; returns path.
std::string write_config(const std::string& path, const std::string& text);

// argv of mpirun with `ranks` loom processes and args.
std::vector<std::string> mpirun_loom(int ranks, const std::vector<std::string>& args);

// "final accuracy: 0.9750 after 300 steps" -> 0.975; NaN when absent.
double final_metric(const std::string& out, const std::string& metric);

// (step, value) of a metric in <output_dir>/metrics.csv.
std::map<int64_t, double> read_metric_csv(const std::string& output_dir, const std::string& metric);

}  // namespace loom::test
