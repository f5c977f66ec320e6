// Helpers for the tests of the torchscript task: models and data written by
// examples/own-model/export.py (or small Python snippets) in Debian's
// python3-torch, and `loom train` runs on them.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../support/subprocess.hpp"

namespace loom::test {

// A fresh folder under /tmp, removed at destruction.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* tag = "loom-own");
  ~TempDir();
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The environment of a process outside any launcher's job.
extern const std::map<std::string, std::string> kNoJob;

// A folder of test data under the build tree, made once by make(folder)
// (which returns "" or why it failed) and kept for later test processes;
// "" with *why when it could not be made.
std::string cached_test_data(const std::string& name, const std::function<std::string(const std::string&)>& make,
                             std::string* why);

// The folder export.py wrote into (digits_cnn.pt, digits_{train,val}.pt,
// gpt.pt, gpt_{train,val}.pt), made once per build tree; empty (with the
// reason in *why) when it could not be made.
const std::string& exported_models(std::string* why);

// Runs Python code (argv[1:] are its sys.argv[1:]) in Debian's python3.
ProcessResult run_python(const std::string& code, const std::vector<std::string>& args = {});

// A config for the digits CNN (cross_entropy on x, y) or the GPT (the
// module's own loss on x, y), with the exported files and the given
// [trainer] lines appended.
std::string digits_cnn_config(const std::string& models, const std::string& trainer_lines);
std::string gpt_config(const std::string& models, const std::string& trainer_lines);

// Writes text to path; returns path.
std::string write_config(const std::string& path, const std::string& text);

// argv of mpirun with `ranks` loom processes and args.
std::vector<std::string> mpirun_loom(int ranks, const std::vector<std::string>& args);

// "final accuracy: 0.9750 after 300 steps" -> 0.975; NaN when absent.
double final_metric(const std::string& out, const std::string& metric);

// (step, value) of a metric in <output_dir>/metrics.csv.
std::map<int64_t, double> read_metric_csv(const std::string& output_dir, const std::string& metric);

}  // namespace loom::test
