// SPDX-License-Identifier: Apache-2.0
// Reading a training run's TOML config: every section and key is checked, and
// every error names the file, line and key and what would be valid.
#include "loom/train/config.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>
#include <thread>

#include "../config_toml.hpp"
#include "task_library.hpp"

namespace loom::train {
namespace {

const std::vector<std::string> kSections = {"trainer", "task", "strategy", "collective", "plugins"};

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Applies one "section.key=value" override to the parsed file.
void apply_override(toml::table* root, const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error::usage("--set " + excerpt(text) + ": expected section.key=value, as in --set trainer.lr=0.01");
  }
  std::string key = text.substr(0, eq), value = text.substr(eq + 1);
  std::vector<std::string> parts;
  size_t start = 0, dot;
  while ((dot = key.find('.', start)) != std::string::npos) {
    parts.push_back(key.substr(start, dot - start));
    start = dot + 1;
  }
  parts.push_back(key.substr(start));
  if (parts.size() < 2) throw Error::usage("--set " + excerpt(text) + ": the key needs a section, as in trainer." + excerpt(key));
  toml::table* table = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!table->contains(parts[i])) table->insert(parts[i], toml::table{});
    table = (*table)[parts[i]].as_table();
    if (table == nullptr) throw Error::usage("--set " + excerpt(text) + ": " + excerpt(parts[i]) + " is not a section");
  }
  // A TOML value ("0.01", "true", "[\"a\"]") keeps its type; anything else is a string.
  toml::node_view<toml::node> parsed;
  toml::table holder;
  try {
    holder = toml::parse("v = " + value);
    table->insert_or_assign(parts.back(), *holder["v"].node());
  } catch (const toml::parse_error&) {
    table->insert_or_assign(parts.back(), value);
  }
}

struct Field {
  std::string type;  // what would be valid, for messages
  std::function<bool(const toml::node&, TrainerSettings*)> set;  // false: wrong type or out of range
};

// Every numeric option has a maximum, so that no value makes the trainer hang,
// spawn without bound or overflow. With these, batch_size * accumulate and the
// micro-batch index max_steps * accumulate stay far inside int64.
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr int64_t kMaxBatch = int64_t{1} << 24;
constexpr int64_t kMaxAccumulate = 65536;
static_assert(kMaxBatch * kMaxAccumulate <= (int64_t{1} << 40) && kMaxSteps * kMaxAccumulate < (int64_t{1} << 47));

// Intra-op threads past a few per core only slow a run down; 1024 bounds it on any machine.
int64_t max_threads() {
  return std::min<int64_t>(1024, 4 * static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())));
}

std::string number_text(double v) {
  std::ostringstream text;
  text << std::setprecision(15) << v;
  return text.str();
}

template <typename T, typename M>
Field int_field(M member, int64_t min, int64_t max, const std::string& note = "") {
  return {"an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]" + note,
          [member, min, max](const toml::node& n, TrainerSettings* s) {
            if (!n.is_integer() || *n.value<int64_t>() < min || *n.value<int64_t>() > max) return false;
            s->*member = static_cast<T>(*n.value<int64_t>());
            return true;
          }};
}

// nan fails every comparison and inf the upper bound, so both are refused.
Field float_field(double TrainerSettings::*member, double lo, double hi, bool hi_open = false) {
  return {"a finite number in [" + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]"),
          [member, lo, hi, hi_open](const toml::node& n, TrainerSettings* s) {
            if (!n.is_number()) return false;
            double v = *n.value<double>();
            if (!std::isfinite(v) || v < lo || v > hi || (hi_open && v == hi)) return false;
            s->*member = v;
            return true;
          }};
}

Field choice_field(std::string TrainerSettings::*member, std::vector<std::string> choices) {
  std::string type = choices.empty() ? "a string" : "one of " + join(choices);
  return {type, [member, choices](const toml::node& n, TrainerSettings* s) {
            if (!n.is_string()) return false;
            std::string v = *n.value<std::string>();
            if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) return false;
            s->*member = v;
            return true;
          }};
}

// Longer paths fail in every system call (PATH_MAX), so they are refused up front.
constexpr size_t kMaxPath = 4095;

Field path_field(std::string TrainerSettings::*member) {
  return {"a path of at most " + std::to_string(kMaxPath) + " bytes", [member](const toml::node& n, TrainerSettings* s) {
            if (!n.is_string() || n.value<std::string>()->size() > kMaxPath) return false;
            s->*member = *n.value<std::string>();
            return true;
          }};
}

// "cpu", "cuda" or "cuda:N" with N a device index of at most 4 digits.
bool is_device(const std::string& v) {
  if (v == "cpu" || v == "cuda") return true;
  if (v.rfind("cuda:", 0) != 0 || v.size() == 5 || v.size() > 9) return false;
  return v.find_first_not_of("0123456789", 5) == std::string::npos;
}

const std::map<std::string, Field>& trainer_fields() {
  static const std::map<std::string, Field> fields = {
      {"task", choice_field(&TrainerSettings::task, {})},
      {"max_steps", int_field<int64_t>(&TrainerSettings::max_steps, 1, kMaxSteps)},
      {"batch_size", int_field<int64_t>(&TrainerSettings::batch_size, 1, kMaxBatch)},
      {"accumulate", int_field<int64_t>(&TrainerSettings::accumulate, 1, kMaxAccumulate)},
      {"optimizer", choice_field(&TrainerSettings::optimizer, {"sgd", "adam", "adamw"})},
      {"lr", float_field(&TrainerSettings::lr, 0, 1000)},
      {"momentum", float_field(&TrainerSettings::momentum, 0, 1, /*hi_open=*/true)},
      {"weight_decay", float_field(&TrainerSettings::weight_decay, 0, 1000)},
      {"schedule", choice_field(&TrainerSettings::schedule, {"constant", "cosine", "linear"})},
      {"warmup_steps", int_field<int64_t>(&TrainerSettings::warmup_steps, 0, kMaxSteps)},
      {"grad_clip", float_field(&TrainerSettings::grad_clip, 0, 1e6)},
      {"seed", int_field<uint64_t>(&TrainerSettings::seed, 0, INT64_MAX)},
      {"log_every", int_field<int64_t>(&TrainerSettings::log_every, 1, kMaxSteps)},
      {"val_every", int_field<int64_t>(&TrainerSettings::val_every, 0, kMaxSteps)},
      {"checkpoint_every", int_field<int64_t>(&TrainerSettings::checkpoint_every, 0, kMaxSteps)},
      {"output_dir", path_field(&TrainerSettings::output_dir)},
      {"device", {"\"cpu\", \"cuda\" or \"cuda:N\"", [](const toml::node& n, TrainerSettings* s) {
                    if (!n.is_string() || !is_device(*n.value<std::string>())) return false;
                    s->device = *n.value<std::string>();
                    return true;
                  }}},
      {"precision", choice_field(&TrainerSettings::precision, {"fp32", "bf16"})},
      {"host_staging", choice_field(&TrainerSettings::host_staging, {"auto", "always"})},
      {"threads", int_field<int64_t>(&TrainerSettings::threads, 0, max_threads(),
                                     " (at most 4 x this machine's " +
                                         std::to_string(std::max(1u, std::thread::hardware_concurrency())) +
                                         " cores, and at most 1024)")},
      {"on_nonfinite", choice_field(&TrainerSettings::on_nonfinite, {"stop", "skip_step"})},
      {"task_library", path_field(&TrainerSettings::task_library)},
  };
  return fields;
}

// The node's type and value, for messages; long values are cut (excerpt).
std::string describe(const toml::node& n) {
  std::ostringstream text;
  n.visit([&](const auto& v) {
    if constexpr (toml::is_value<decltype(v)>) {
      text << v;
    } else {
      text << "...";
    }
  });
  return std::string(toml::impl::node_type_friendly_names[static_cast<int>(n.type())]) + " " + excerpt(text.str());
}

// Task option names are short words and values at most a path, so longer ones are
// refused here, before a task could quote them.
void check_task_option_size(const std::string& path, const std::string& key, const toml::node& node) {
  constexpr size_t kMaxKey = 64;
  if (key.size() > kMaxKey) {
    throw Error::usage(toml_where(path, node) + ": [task] key '" + excerpt(key) + "' is " + std::to_string(key.size()) +
                       " bytes long; task option names are at most " + std::to_string(kMaxKey));
  }
  if (node.is_string() && node.value<std::string>()->size() > kMaxPath) {
    throw Error::usage(toml_where(path, node) + ": task." + key + " is " +
                       std::to_string(node.value<std::string>()->size()) + " bytes long; a task option holds at most " +
                       std::to_string(kMaxPath) + " (a path)");
  }
}

}  // namespace

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::vector<std::string>& cli_plugin_paths) {
  toml::table root = parse_toml_file(path);
  for (const auto& o : overrides) apply_override(&root, o);

  TrainConfig config;
  config.path = path;
  for (const auto& [key, node] : root) {
    std::string k(key.str());
    if (std::find(kSections.begin(), kSections.end(), k) == kSections.end()) {
      throw Error::usage(toml_where(path, node) + ": unknown section [" + excerpt(k) + "]; valid sections: " + join(kSections));
    }
    if (!node.is_table()) {
      throw Error::usage(toml_where(path, node) + ": " + excerpt(k) + " must be a section ([" + excerpt(k) + "])");
    }
  }

  const toml::table* trainer = root["trainer"].as_table();
  if (trainer == nullptr) {
    throw Error::usage(path + ": no [trainer] section; it needs at least task = \"digits\" (or " + join(task_names()) + ")");
  }
  std::vector<std::string> valid;
  for (const auto& [name, field] : trainer_fields()) valid.push_back(name);
  for (const auto& [key, node] : *trainer) {
    std::string k(key.str());
    auto it = trainer_fields().find(k);
    if (it == trainer_fields().end()) {
      throw Error::usage(toml_where(path, node) + ": unknown key trainer." + excerpt(k) + "; valid keys: " + join(valid));
    }
    if (!it->second.set(node, &config.trainer)) {
      throw Error::usage(toml_where(path, node) + ": trainer." + k + " must be " + it->second.type + ", not " + describe(node));
    }
  }
  if (config.trainer.task.empty()) {
    throw Error::usage(toml_where(path, *trainer) + ": trainer.task is required (" + join(task_names()) + ")");
  }
  if (!config.trainer.task_library.empty()) {
    load_task_library(config.trainer.task_library, toml_where(path, *(*trainer).get("task_library")));
  }
  const auto tasks = task_names();
  if (std::find(tasks.begin(), tasks.end(), config.trainer.task) == tasks.end()) {
    throw Error::usage(toml_where(path, *(*trainer).get("task")) + ": unknown task '" + excerpt(config.trainer.task) +
                       "'; valid tasks: " + join(tasks));
  }
  if (config.trainer.output_dir.empty()) config.trainer.output_dir = "runs/" + config.trainer.task;

  if (const toml::table* task = root["task"].as_table()) {
    for (const auto& [key, node] : *task) {
      std::string k(key.str());
      check_task_option_size(path, k, node);
      config.task.values[k] = toml_option_text(path, "task." + k, node);
      config.task.sources[k] = toml_where(path, node);
    }
  }

  if (const toml::table* strategy = root["strategy"].as_table()) {
    for (const auto& [key, node] : *strategy) {
      std::string k(key.str());
      if (k == "name") {
        config.strategy = toml_plugin_name(path, "strategy.name", node, LOOM_KIND_STRATEGY);
        config.strategy_where = toml_where(path, node);
      } else if (k != "options") {
        throw Error::usage(toml_where(path, node) + ": unknown key strategy." + excerpt(k) + "; valid keys: name, options");
      }
    }
    if (const toml::table* options = (*strategy)["options"].as_table()) {
      auto& values = config.host.options[{LOOM_KIND_STRATEGY, config.strategy}];
      auto& sources = config.host.option_sources[{LOOM_KIND_STRATEGY, config.strategy}];
      for (const auto& [key, node] : *options) {
        std::string k(key.str());
        values[k] = toml_option_text(path, "strategy.options." + k, node);
        sources[k] = toml_where(path, node);
      }
    }
  }

  HostFileConfig host = host_config_from(root, path);
  for (auto& [k, v] : host.options) config.host.options[k] = v;
  for (auto& [k, v] : host.option_sources) config.host.option_sources[k] = v;
  config.host.default_collective = host.collective;
  if (const toml::node* name = root["collective"]["name"].node()) config.collective_where = toml_where(path, *name);
  config.host.search_path = plugin_search_path(cli_plugin_paths, host.plugin_paths);
  return config;
}

}  // namespace loom::train
