// Reading a training run's TOML config: every section and key is checked, and
// every error names the file, line and key and what would be valid.
#include "loom/train/config.hpp"

#include <algorithm>
#include <functional>
#include <sstream>
#include <map>

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
    throw Error::usage("--set " + text + ": expected section.key=value, as in --set trainer.lr=0.01");
  }
  std::string key = text.substr(0, eq), value = text.substr(eq + 1);
  std::vector<std::string> parts;
  size_t start = 0, dot;
  while ((dot = key.find('.', start)) != std::string::npos) {
    parts.push_back(key.substr(start, dot - start));
    start = dot + 1;
  }
  parts.push_back(key.substr(start));
  if (parts.size() < 2) throw Error::usage("--set " + text + ": the key needs a section, as in trainer." + key);
  toml::table* table = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!table->contains(parts[i])) table->insert(parts[i], toml::table{});
    table = (*table)[parts[i]].as_table();
    if (table == nullptr) throw Error::usage("--set " + text + ": " + parts[i] + " is not a section");
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
  std::string type;  // for messages
  std::function<bool(const toml::node&, TrainerSettings*)> set;  // false: wrong type
};

template <typename T, typename M>
Field int_field(M member, int64_t min) {
  return {"an integer >= " + std::to_string(min), [member, min](const toml::node& n, TrainerSettings* s) {
            if (!n.is_integer() || *n.value<int64_t>() < min) return false;
            s->*member = static_cast<T>(*n.value<int64_t>());
            return true;
          }};
}

Field float_field(double TrainerSettings::*member, double min) {
  return {"a number >= " + std::to_string(min), [member, min](const toml::node& n, TrainerSettings* s) {
            if (!n.is_number() || *n.value<double>() < min) return false;
            s->*member = *n.value<double>();
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

const std::map<std::string, Field>& trainer_fields() {
  static const std::map<std::string, Field> fields = {
      {"task", choice_field(&TrainerSettings::task, {})},
      {"max_steps", int_field<int64_t>(&TrainerSettings::max_steps, 1)},
      {"batch_size", int_field<int64_t>(&TrainerSettings::batch_size, 1)},
      {"accumulate", int_field<int64_t>(&TrainerSettings::accumulate, 1)},
      {"optimizer", choice_field(&TrainerSettings::optimizer, {"sgd", "adam", "adamw"})},
      {"lr", float_field(&TrainerSettings::lr, 0)},
      {"momentum", float_field(&TrainerSettings::momentum, 0)},
      {"weight_decay", float_field(&TrainerSettings::weight_decay, 0)},
      {"schedule", choice_field(&TrainerSettings::schedule, {"constant", "cosine", "linear"})},
      {"warmup_steps", int_field<int64_t>(&TrainerSettings::warmup_steps, 0)},
      {"grad_clip", float_field(&TrainerSettings::grad_clip, 0)},
      {"seed", int_field<uint64_t>(&TrainerSettings::seed, 0)},
      {"log_every", int_field<int64_t>(&TrainerSettings::log_every, 1)},
      {"val_every", int_field<int64_t>(&TrainerSettings::val_every, 0)},
      {"checkpoint_every", int_field<int64_t>(&TrainerSettings::checkpoint_every, 0)},
      {"output_dir", choice_field(&TrainerSettings::output_dir, {})},
      {"device", {"\"cpu\", \"cuda\" or \"cuda:N\"", [](const toml::node& n, TrainerSettings* s) {
                    if (!n.is_string()) return false;
                    std::string v = *n.value<std::string>();
                    if (v != "cpu" && v != "cuda" && v.rfind("cuda:", 0) != 0) return false;
                    s->device = v;
                    return true;
                  }}},
      {"threads", int_field<int64_t>(&TrainerSettings::threads, 0)},
      {"on_nonfinite", choice_field(&TrainerSettings::on_nonfinite, {"stop", "skip_step"})},
      {"task_library", choice_field(&TrainerSettings::task_library, {})},
  };
  return fields;
}

std::string describe(const toml::node& n) {
  std::ostringstream text;
  n.visit([&](const auto& v) {
    if constexpr (toml::is_value<decltype(v)>) {
      text << v;
    } else {
      text << "...";
    }
  });
  return std::string(toml::impl::node_type_friendly_names[static_cast<int>(n.type())]) + " " + text.str();
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
      throw Error::usage(toml_where(path, node) + ": unknown section [" + k + "]; valid sections: " + join(kSections));
    }
    if (!node.is_table()) throw Error::usage(toml_where(path, node) + ": " + k + " must be a section ([" + k + "])");
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
      throw Error::usage(toml_where(path, node) + ": unknown key trainer." + k + "; valid keys: " + join(valid));
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
    throw Error::usage(toml_where(path, *(*trainer).get("task")) + ": unknown task '" + config.trainer.task +
                       "'; valid tasks: " + join(tasks));
  }
  if (config.trainer.output_dir.empty()) config.trainer.output_dir = "runs/" + config.trainer.task;

  if (const toml::table* task = root["task"].as_table()) {
    for (const auto& [key, node] : *task) {
      std::string k(key.str());
      config.task.values[k] = toml_option_text(path, "task." + k, node);
      config.task.sources[k] = toml_where(path, node);
    }
  }

  if (const toml::table* strategy = root["strategy"].as_table()) {
    for (const auto& [key, node] : *strategy) {
      std::string k(key.str());
      if (k == "name") {
        if (!node.is_string()) throw Error::usage(toml_where(path, node) + ": strategy.name must be a string, not " + describe(node));
        config.strategy = *node.value<std::string>();
        config.strategy_where = toml_where(path, node);
      } else if (k != "options") {
        throw Error::usage(toml_where(path, node) + ": unknown key strategy." + k + "; valid keys: name, options");
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
