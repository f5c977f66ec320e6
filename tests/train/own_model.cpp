// SPDX-License-Identifier: Apache-2.0
#include "own_model.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "test_paths.hpp"

namespace loom::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Makes the folder (or finds it made by an earlier test process).
std::string make_test_data(const std::string& name, const std::function<std::string(const std::string&)>& make,
                           std::string* why) {
  const fs::path final_dir = fs::path(kTestDataDir) / name;
  std::error_code ec;
  if (fs::exists(final_dir / ".complete", ec)) return final_dir.string();
  fs::create_directories(kTestDataDir, ec);
  std::string tmpl = final_dir.string() + ".tmp-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    *why = "cannot create a folder under " + std::string(kTestDataDir);
    return "";
  }
  *why = make(tmpl);
  if (!why->empty()) {
    fs::remove_all(tmpl, ec);
    return "";
  }
  std::ofstream(fs::path(tmpl) / ".complete") << "ok\n";
  // Another test process may have won the race; its copy is as good.
  if (std::rename(tmpl.c_str(), final_dir.c_str()) != 0) fs::remove_all(tmpl, ec);
  return fs::exists(final_dir / ".complete", ec) ? final_dir.string() : "";
}

}  // namespace

std::string cached_test_data(const std::string& name, const std::string& recipe,
                             const std::function<std::string(const std::string&)>& make, std::string* why) {
  char hash[24];
  std::snprintf(hash, sizeof hash, "-%016zx", std::hash<std::string>{}(recipe));
  const std::string key = name + hash;
  // Once per process: (folder, why it could not be made).
  static std::map<std::string, std::pair<std::string, std::string>> made;
  auto it = made.find(key);
  if (it == made.end()) {
    std::string failure;
    std::string dir = make_test_data(key, make, &failure);
    it = made.emplace(key, std::make_pair(dir, failure)).first;
  }
  if (why) *why = it->second.second;
  return it->second.first;
}

std::string exported_models(std::string* why) {
  const std::string script = std::string(kSourceDir) + "/examples/own-model/export.py";
  std::ifstream in(script);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cached_test_data("own-model", text, [script](const std::string& dir) -> std::string {
    auto r = run_process({kDebianPython, script, "--out", dir}, {}, 300s);
    return r.exit_code == 0 ? "" : "export.py failed (exit " + std::to_string(r.exit_code) + "): " + r.out + r.err;
  }, why);
}

ProcessResult run_python(const std::string& code, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kDebianPython, "-c", code};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 300s);
}

std::string digits_cnn_config(const std::string& models, const std::string& trainer_lines) {
  return "[trainer]\ntask = \"torchscript\"\n" + trainer_lines + "\n[task]\nmodule = \"" + models +
         "/digits_cnn.pt\"\ntrain = \"" + models + "/digits_train.pt\"\nvalidation = \"" + models +
         "/digits_val.pt\"\ninputs = [\"x\"]\nloss = \"cross_entropy\"\ntarget = \"y\"\n";
}

std::string gpt_config(const std::string& models, const std::string& trainer_lines) {
  return "[trainer]\ntask = \"torchscript\"\n" + trainer_lines + "\n[task]\nmodule = \"" + models +
         "/gpt.pt\"\ntrain = \"" + models + "/gpt_train.pt\"\nvalidation = \"" + models +
         "/gpt_val.pt\"\ninputs = [\"x\", \"y\"]\nloss = \"module\"\n";
}

}  // namespace loom::test
