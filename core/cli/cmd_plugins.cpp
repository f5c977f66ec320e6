// SPDX-License-Identifier: Apache-2.0
// `loom plugins`: list every plugin found, `info` on one, `check` that one
// really works here. Listing probes each file in a child process, so a broken
// plugin is named with its reason and never stops the listing.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

#include "check_kit.hpp"
#include "commands.hpp"
#include "loom/collective.hpp"
#include "loom/plugin_json.hpp"
#include "table.hpp"

namespace loom::cli {
namespace {

// A plugin's warnings go to stderr after the table, where they do not break
// its columns; several plugins of one unsafe folder share one warning.
void log_warnings(const std::vector<PluginRecord>& records) {
  std::vector<std::string> done;
  for (const auto& r : records) {
    for (const auto& w : r.warnings) {
      if (std::find(done.begin(), done.end(), w) != done.end()) continue;
      done.push_back(w);
      spdlog::warn("{}", w);
    }
  }
}

int list(const GlobalOptions& global, bool as_json) {
  auto host = make_host(global);
  auto records = host->probe_all();
  if (as_json) {
    std::cout << plugin_listing_json(*host, records) << "\n";
    return 0;
  }
  if (records.empty()) {
    std::cout << "no plugins found; searched:\n";
    for (const auto& d : host->config().search_path) std::cout << "  " << d.path << "  (" << d.origin << ")\n";
    return 0;
  }
  Table table({"NAME", "KIND", "VERSION", "ABI", "PATH", "STATUS"});
  for (const auto& r : records) {
    table.add({r.candidate.name, kind_name(r.candidate.kind), r.descriptor ? r.descriptor->version : "-",
               r.descriptor ? abi_string(r.descriptor->abi_version) : "-", r.candidate.path, r.status_text()});
  }
  table.print(std::cout);
  std::cout.flush();
  log_warnings(records);
  return 0;
}


int info(const GlobalOptions& global, const std::string& name, const std::string& kind, bool as_json) {
  auto host = make_host(global);
  PluginRecord r = host->probe(select_plugin(*host, name, kind));
  if (as_json) {
    std::cout << plugin_record_json(r) << "\n";
  } else if (!r.descriptor) {
    std::cout << "Path:         " << r.candidate.path << "\nStatus:       " << r.status_text() << "\n";
  } else {
    const auto& d = *r.descriptor;
    std::string caps;
    for (const auto& c : capability_names(r.candidate.kind, d.capabilities)) caps += (caps.empty() ? "" : ", ") + c;
    // A vtable newer than what was negotiated is legal (an older host, or a
    // plugin that chose less); show both so a vendor sees which one counts.
    std::string abi = abi_string(d.abi_version);
    if (d.vtable_abi_version != d.abi_version) abi += " (vtable laid out for " + abi_string(d.vtable_abi_version) + ")";
    std::cout << "Name:         " << d.name << "\n"
              << "Kind:         " << kind_name(r.candidate.kind) << "\n"
              << "Version:      " << d.version << "\n"
              << "ABI:          " << abi << "\n"
              << "Description:  " << d.description << "\n"
              << "Path:         " << r.candidate.path << "  (found by " << r.candidate.origin << ")\n"
              << "Capabilities: " << (caps.empty() ? "none" : caps) << "\n";
    if (r.candidate.kind == LOOM_KIND_COLLECTIVE) {
      std::string ops, absent;
      for (const auto& o : op_names(LOOM_OP_ALL & ~d.absent_ops)) ops += (ops.empty() ? "" : ", ") + o;
      for (const auto& o : op_names(d.absent_ops)) absent += (absent.empty() ? "" : ", ") + o;
      std::cout << "Operations:   " << ops << (absent.empty() ? "" : "  (absent: " + absent + ")") << "\n"
                << "Traffic:      "
                << (d.comm_stats ? "counted per communicator (comm_stats)" : "not reported (no comm_stats)") << "\n";
    }
    std::cout
              << "Status:       " << r.status_text() << "\n"
              << "Options:      " << (d.options.empty() ? "none" : "") << "\n";
    if (!d.options.empty()) {
      Table table({"  NAME", "TYPE", "DEFAULT", "HELP"});
      for (const auto& o : d.options) {
        table.add({"  " + o.name, option_type_name(o.type), o.default_value ? *o.default_value : "(required)", o.help});
      }
      table.print(std::cout);
    }
  }
  std::cout.flush();
  log_warnings({r});
  if (r.state == PluginRecord::State::kBroken) {
    std::cerr << "loom: error: " << kind_name(r.candidate.kind) << " plugin '" << name << "' (" << r.candidate.path
              << ") is broken: " << r.reason << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

const PluginCandidate& select_plugin(const Host& host, const std::string& name, const std::string& kind_word) {
  std::optional<loom_kind> kind;
  if (!kind_word.empty()) kind = parse_kind(kind_word);
  std::vector<const PluginCandidate*> matches;
  for (const auto& c : host.candidates()) {
    if (c.name == name && (!kind || c.kind == *kind) && host.find(c.kind, c.name) == &c) matches.push_back(&c);
  }
  if (matches.empty()) {
    std::string found;
    for (const auto& c : host.candidates()) found += (found.empty() ? "" : ", ") + c.name + " (" + kind_name(c.kind) + ")";
    throw Error::usage("no " + (kind ? std::string(kind_name(*kind)) + " " : std::string()) + "plugin named '" + excerpt(name) +
                       "'; found: " + (found.empty() ? "none" : found));
  }
  if (matches.size() > 1) {
    throw Error::usage("'" + excerpt(name) + "' names both a collective and a strategy plugin: add --kind collective or --kind strategy");
  }
  return *matches.front();
}

void add_plugins_command(CLI::App& app, const GlobalOptions& global, Runner* run) {
  auto* plugins = app.add_subcommand("plugins", "List the plugins found, with their status");
  auto as_json = std::make_shared<bool>(false);
  plugins->add_flag("--json", *as_json, "Print JSON instead of a table");
  plugins->callback([plugins, as_json, &global, run] {
    if (plugins->get_subcommands().empty()) *run = [&global, as_json] { return list(global, *as_json); };
  });

  struct Args {
    std::string name, kind;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* info_cmd = plugins->add_subcommand("info", "Describe one plugin: options, capabilities, availability");
  info_cmd->add_option("name", args->name, "Plugin name")->required();
  info_cmd->add_option("--kind", args->kind, "collective or strategy")->check(CLI::IsMember({"collective", "strategy"}));
  info_cmd->add_flag("--json", args->json, "Print JSON");
  info_cmd->callback([args, &global, run] { *run = [=, &global] { return info(global, args->name, args->kind, args->json); }; });

  auto check = std::make_shared<CheckArgs>();
  auto* check_cmd = plugins->add_subcommand(
      "check", "Run the conformance kit against a plugin (a collective's every rule, op and dtype; a strategy's "
               "negotiation, options and hooks in a short run)");
  check_cmd->add_option("plugin", check->target, "Plugin name, or the path of a lib<name>_<kind>.so")->required();
  check_cmd->add_option("--kind", check->kind, "collective or strategy")->check(CLI::IsMember({"collective", "strategy"}));
  check_cmd->add_option("-n,--nproc", check->nproc, "Local processes to run it on (default 1)");
  check_cmd->add_option("--op", check->ops, "Only this operation's cases, and the general rules (repeatable)");
  check_cmd->add_option("--option", check->options, "KEY=VALUE for the plugin (repeatable)");
  check_cmd->add_option("--timeout-ms", check->timeout_ms, "Bound of every wait in the kit (default 20000)")
      ->check(CLI::PositiveNumber);
  check_cmd->add_option("--device", check->device, "Where the kit's buffers live: cpu or cuda (default cpu)");
  check_cmd->add_flag("--quick", check->quick, "Only open it here and verify one allreduce");
  check_cmd->callback([check, &global, run] { *run = [=, &global] { return check_plugin(global, *check); }; });
}

}  // namespace loom::cli
