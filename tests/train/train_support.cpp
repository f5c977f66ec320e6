// SPDX-License-Identifier: Apache-2.0
#include "train_support.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "test_paths.hpp"

namespace loom::test {

namespace fs = std::filesystem;

TempDir::TempDir(const char* tag) {
  std::string tmpl = std::string("/tmp/") + tag + "-XXXXXX";
  path = mkdtemp(tmpl.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::string TempDir::file(const std::string& name, const std::string& text) const {
  return write_config((path / name).string(), text);
}

const std::map<std::string, std::string> kNoJob = {{"RANK", ""}, {"WORLD_SIZE", ""}, {"MASTER_ADDR", ""}};

ProcessResult train(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  std::vector<std::string> argv = {kLoomBinary, "train"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, kNoJob, timeout);
}

std::string write_config(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> mpirun_loom(int ranks, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kMpirun, "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(ranks),
                                   kLoomBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

double final_metric(const std::string& out, const std::string& metric) {
  const std::string key = "final " + metric + ": ";
  auto at = out.rfind(key);
  if (at == std::string::npos) return NAN;
  return std::strtod(out.c_str() + at + key.size(), nullptr);
}

std::map<int64_t, double> read_metric_csv(const std::string& output_dir, const std::string& metric) {
  std::ifstream in(output_dir + "/metrics.csv");
  std::map<int64_t, double> out;
  std::string line;
  std::getline(in, line);  // step,elapsed_s,metric,value
  while (std::getline(in, line)) {
    std::stringstream row(line);
    std::string step, elapsed, name, value;
    if (std::getline(row, step, ',') && std::getline(row, elapsed, ',') && std::getline(row, name, ',') &&
        std::getline(row, value) && name == metric)
      out[std::stoll(step)] = std::stod(value);
  }
  return out;
}

}  // namespace loom::test
