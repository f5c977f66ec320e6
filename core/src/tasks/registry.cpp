// SPDX-License-Identifier: Apache-2.0
// tasks/registry.cpp: the tasks by name (built-in, and those users register),
// the options each accepts, and the checks every [task] option goes through
// before a task sees it.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "builtin.hpp"

namespace loom::train {
namespace {

struct TaskEntry {
  std::string name;
  TaskFactory make;
  std::vector<TaskOptionInfo> options;
};

std::vector<TaskEntry>& table() {
  static std::vector<TaskEntry> entries = {
      {"charlm",
       tasks::make_charlm,
       {{"path", "string", "", "UTF-8 text file to model, byte by byte (required)"},
        {"context", "int", "64", "window length in bytes"},
        {"d_model", "int", "128", "embedding width"},
        {"layers", "int", "2", "transformer blocks"},
        {"heads", "int", "4", "attention heads (must divide d_model)"},
        {"ffn", "int", "512", "hidden width of each block's MLP"},
        {"val_fraction", "float", "0.1", "trailing fraction of the file held out for validation"}}},
      {"digits",
       tasks::make_digits,
       {{"path", "string", "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz",
         "digits CSV (plain or gzip): 64 pixels 0..16 then the label, per row"},
        {"hidden", "int", "128", "width of the two hidden layers"},
        {"test_fraction", "float", "0.2", "fraction of the rows held out for testing"},
        {"split_seed", "int", "0", "seed of the train/test split (independent of the run seed)"}}},
      {"teacher",
       tasks::make_teacher,
       {{"inputs", "int", "16", "input features"},
        {"hidden", "int", "32", "hidden width of the student"},
        {"samples", "int", "4096", "training samples"},
        {"teacher_seed", "int", "1234", "seed of the teacher's weights and the data"},
        {"noise", "float", "0.0", "standard deviation of the noise added to training targets"},
        {"emulated_step_ms", "float", "0.0",
         "milliseconds each training batch waits, as a host waits for its accelerator (0 to 10000; 0: none): "
         "peers sharing one machine's cores then contend as GPU hosts would (benchmarks of rounds)"}}},
      {"torchscript", tasks::make_torchscript, tasks::torchscript_options()},
  };
  return entries;
}

const TaskEntry& find(const std::string& task) {
  for (const auto& entry : table()) {
    if (task == entry.name) return entry;
  }
  std::string valid;
  for (const auto& name : task_names()) valid += (valid.empty() ? "" : ", ") + name;
  throw Error::usage("unknown task '" + task + "'; valid tasks: " + valid);
}

bool parses_as(const std::string& type, const std::string& text) {
  if (type == "string" || type == "list") return true;
  if (type == "bool") return text == "true" || text == "false";
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  if (type == "int") {
    (void)std::strtoll(text.c_str(), &end, 10);
  } else {
    double value = std::strtod(text.c_str(), &end);
    if (!std::isfinite(value)) return false;
  }
  return errno == 0 && *end == '\0';
}

const char* example_of(const std::string& type) {
  if (type == "int") return "an integer such as 128";
  if (type == "float") return "a number such as 0.2";
  if (type == "bool") return "true or false";
  if (type == "list") return "a list of strings such as [\"x\", \"mask\"]";
  return "a string";
}

}  // namespace

namespace tasks {

std::string where(const TaskOptions& options, const std::string& name) {
  auto it = options.sources.find(name);
  return it == options.sources.end() || it->second.empty() ? "" : it->second + ": ";
}

torch::Tensor index_tensor(const std::vector<int64_t>& indices, int64_t size, const char* dataset) {
  for (int64_t i : indices) {
    if (i < 0 || i >= size) {
      throw Error::runtime(std::string(dataset) + ": sample index " + std::to_string(i) + " outside [0, " +
                           std::to_string(size) + ")");
    }
  }
  return torch::tensor(indices, torch::kLong);
}

torch::Device device_of(torch::nn::Module& model) {
  auto params = model.parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

}  // namespace tasks

void Task::to(const torch::Device& device) {
  torch::NoGradGuard no_grad;
  // set_data keeps each tensor's identity (what the optimizer and the
  // strategy's views hold), as Module::to does.
  for (auto& [name, t] : parameters()) t.set_data(t.to(device));
  for (auto& [name, t] : buffers()) t.set_data(t.to(device));
}

std::string TaskArgs::text(const std::string& name) const {
  if (auto it = raw_.values.find(name); it != raw_.values.end()) return it->second;
  for (const auto& info : infos_) {
    if (info.name == name) return info.default_value;
  }
  throw Error::runtime("task '" + task_ + "' read undeclared option '" + name + "'");  // a bug in the task
}

std::string TaskArgs::where(const std::string& name) const { return tasks::where(raw_, name); }

Error TaskArgs::invalid(const std::string& name, const std::string& problem) const {
  return Error::usage(tasks::where(raw_, name) + "option '" + name + "' for task '" + task_ + "' " + problem);
}

int64_t TaskArgs::get_int(const std::string& name, int64_t min, int64_t max) const {
  errno = 0;
  int64_t value = std::strtoll(text(name).c_str(), nullptr, 10);
  if (errno == ERANGE || value < min || value > max) {
    throw invalid(name, (max == INT64_MAX ? "must be at least " + std::to_string(min)
                                          : "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]") +
                            ", got " + excerpt(text(name)));
  }
  return value;
}

std::vector<std::string> TaskArgs::get_list(const std::string& name) const {
  std::vector<std::string> items;
  const std::string all = text(name);
  size_t start = 0;
  while (start < all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    items.push_back(all.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

double TaskArgs::get_float(const std::string& name, double lo, double hi, bool hi_open) const {
  double value = std::strtod(text(name).c_str(), nullptr);
  if (value < lo || value > hi || (hi_open && value == hi)) {
    std::ostringstream range;
    range << "must be in [" << lo << ", " << hi << (hi_open ? ")" : "]") << ", got " << excerpt(text(name));
    throw invalid(name, range.str());
  }
  return value;
}


std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& entry : table()) names.push_back(entry.name);
  return names;
}

void register_task(const std::string& name, std::vector<TaskOptionInfo> options, TaskFactory factory) {
  if (name.empty() || !factory) throw Error::usage("register_task: a task needs a name and a factory");
  for (const auto& entry : table()) {
    if (entry.name == name) throw Error::usage("register_task: a task named '" + name + "' is already registered");
  }
  for (const auto& option : options) {
    if (option.type != "int" && option.type != "float" && option.type != "string" && option.type != "bool" &&
        option.type != "list") {
      throw Error::usage("register_task: option '" + option.name + "' of task '" + name + "' has type '" +
                         option.type + "'; valid types: int, float, string, bool, list");
    }
  }
  table().push_back({name, std::move(factory), std::move(options)});
}

std::vector<TaskOptionInfo> task_options(const std::string& task) { return find(task).options; }

std::unique_ptr<Task> make_task(const std::string& task, const TaskOptions& options, uint64_t seed) {
  const TaskEntry& entry = find(task);
  for (const auto& [key, value] : options.values) {
    const TaskOptionInfo* info = nullptr;
    for (const auto& candidate : entry.options) {
      if (candidate.name == key) info = &candidate;
    }
    if (!info) {
      std::string valid;
      for (const auto& candidate : entry.options) valid += (valid.empty() ? "" : ", ") + candidate.name;
      throw Error::usage(tasks::where(options, key) + "unknown option '" + key + "' for task '" + task +
                         "'; valid options: " + valid);
    }
    if (!parses_as(info->type, value)) {
      throw Error::usage(tasks::where(options, key) + "option '" + key + "' for task '" + task + "' must be " +
                         (info->type == "int" ? "an " : "a ") + info->type + " (" + example_of(info->type) +
                         "), got '" + excerpt(value) + "'");
    }
  }
  auto made = entry.make(TaskArgs(task, options, entry.options), seed);
  if (!made) throw Error::runtime("the factory of task '" + task + "' returned no task");
  return made;
}

}  // namespace loom::train
