// SPDX-License-Identifier: Apache-2.0
// loom/train/task_options.hpp: the [task] section of a config, as the
// trainer hands it to a task (no LibTorch here).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace loom::train {

// Option values of the [task] section, as text, with where each was set
// ("file:line") for error messages.
struct TaskOptions {
  std::map<std::string, std::string> values;
  std::map<std::string, std::string> sources;
};

// The task names: the built-in "charlm", "digits", "teacher", "torchscript",
// then those registered with register_task (loom/train/task.hpp).
std::vector<std::string> task_names();

// Description of one task option, for validation and `loom train --help-task`.
struct TaskOptionInfo {
  std::string name;
  std::string type;  // "int", "float", "string", "bool", "list" (of strings, joined by commas)
  std::string default_value;
  std::string help;
};

// The options a task accepts; throws Error::usage for an unknown task.
std::vector<TaskOptionInfo> task_options(const std::string& task);

}  // namespace loom::train
