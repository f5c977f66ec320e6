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

// The built-in task names: "charlm", "digits", "teacher".
std::vector<std::string> task_names();

}  // namespace loom::train
