// SPDX-License-Identifier: Apache-2.0
// Helpers for the tests of the torchscript task: models and data written by
// examples/own-model/export.py (or small Python snippets) in Debian's
// python3-torch, and `loom train` runs on them.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "train_support.hpp"

namespace loom::test {

// A folder of test data under the build tree, made once by make(folder)
// (which returns "" or why it failed) and kept for later test processes
// (and remembered in this one); "" with *why when it could not be made.
// recipe is what the data is made from (a script's text): the folder is
// named by its hash, so a changed recipe makes the data afresh.
std::string cached_test_data(const std::string& name, const std::string& recipe,
                             const std::function<std::string(const std::string&)>& make, std::string* why);

// The folder export.py wrote into (digits_cnn.pt, digits_{train,val}.pt,
// gpt.pt, gpt_{train,val}.pt), made once per build tree; empty (with the
// reason in *why) when it could not be made.
std::string exported_models(std::string* why);

// Runs Python code (argv[1:] are its sys.argv[1:]) in Debian's python3.
ProcessResult run_python(const std::string& code, const std::vector<std::string>& args = {});

// A config for the digits CNN (cross_entropy on x, y) or the GPT (the
// module's own loss on x, y), with the exported files and the given
// [trainer] lines appended.
std::string digits_cnn_config(const std::string& models, const std::string& trainer_lines);
std::string gpt_config(const std::string& models, const std::string& trainer_lines);

}  // namespace loom::test
