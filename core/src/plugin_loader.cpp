// SPDX-License-Identifier: Apache-2.0
#include "plugin_loader.hpp"

#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <regex>
#include <vector>

#include "elf_exports.hpp"
#include "loom/collective.h"
#include "loom/status.hpp"
#include "loom/strategy.h"

namespace loom {
namespace {

// Loaded libraries are never unloaded: this list is deliberately leaked.
void keep_resident(boost::dll::shared_library library) {
  static std::mutex mutex;
  static auto* resident = new std::vector<boost::dll::shared_library>();
  std::lock_guard<std::mutex> lock(mutex);
  resident->push_back(std::move(library));
}

std::string entry_symbol(loom_kind kind) {
  return std::string("loom_") + kind_name(kind) + "_plugin_v" + std::to_string(LOOM_ABI_MAJOR);
}

// When the expected entry is missing, say which ABI majors the file speaks.
std::string explain_missing_entry(const PluginCandidate& c) {
  const std::string expected = entry_symbol(c.kind);
  std::vector<std::string> majors;
  try {
    boost::dll::library_info info(c.path);
    const std::regex pattern(std::string("loom_") + kind_name(c.kind) + "_plugin_v([0-9]+)");
    for (const auto& symbol : info.symbols()) {
      std::smatch m;
      if (std::regex_match(symbol, m, pattern)) majors.push_back(m[1]);
    }
  } catch (const std::exception&) {
  }
  const std::string host = std::to_string(LOOM_ABI_MAJOR);
  if (majors.empty()) {
    return "no entry point " + expected + ": the file exports no loom_" + std::string(kind_name(c.kind)) +
           "_plugin_v<N> symbol (is it a Loom " + kind_name(c.kind) + " plugin?)";
  }
  std::string list;
  for (const auto& m : majors) list += (list.empty() ? "" : ", ") + m;
  bool newer = majors.front().size() > 4 || std::stoul(majors.front()) > LOOM_ABI_MAJOR;
  return "plugin speaks ABI major " + list + " but this host speaks " + host + " (no entry point " + expected +
         "); " + (newer ? "upgrade Loom to use this plugin" : "rebuild the plugin against this Loom SDK");
}

// sdk/include/loom/plugin.h's rule for loom_option_decl.name: [a-z0-9_]+.
bool valid_option_name(const char* name) {
  if (*name == '\0') return false;
  for (const char* p = name; *p != '\0'; ++p) {
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  }
  return true;
}

bool copy_descriptor(const loom_plugin_info* info, const PluginCandidate& c, PluginDescriptor* d, std::string* reason) {
  if (info == nullptr) return *reason = "vtable has no plugin info (info is NULL)", false;
  if (info->struct_size < sizeof(loom_plugin_info)) {
    return *reason = "plugin info struct_size " + std::to_string(info->struct_size) + " is smaller than v1's " +
                     std::to_string(sizeof(loom_plugin_info)),
           false;
  }
  if (info->kind != c.kind) {
    return *reason = std::string("plugin says it is a ") + kind_name(info->kind) + " but the file name says " +
                     kind_name(c.kind),
           false;
  }
  if (info->name == nullptr || c.name != info->name) {
    return *reason = "plugin calls itself '" + std::string(info->name ? info->name : "(null)") + "' but its file is lib" +
                     c.name + "_" + kind_name(c.kind) + ".so: file name, symbol and self-reported name must agree",
           false;
  }
  d->name = info->name;
  d->version = info->version ? info->version : "";
  d->description = info->description ? info->description : "";
  d->capabilities = info->capabilities;
  if (info->num_options > 0 && info->options == nullptr) return *reason = "options is NULL but num_options > 0", false;
  for (uint32_t i = 0; i < info->num_options; ++i) {
    const loom_option_decl& o = info->options[i];
    if (o.name == nullptr || *o.name == '\0') return *reason = "option " + std::to_string(i) + " has no name", false;
    // Config keys and LOOM_<NAME> variables are made from option names.
    if (!valid_option_name(o.name)) {
      return *reason = "option " + std::to_string(i) + " is named '" + excerpt(o.name) +
                       "': option names must be [a-z0-9_]+ (lower-case letters, digits and underscores)",
             false;
    }
    if (d->find_option(o.name) != nullptr) {
      return *reason = "option '" + excerpt(o.name) + "' is declared twice: option names must be unique within a plugin",
             false;
    }
    if (std::strcmp(option_type_name(o.type), "unknown") == 0) {
      return *reason = std::string("option '") + o.name + "' has unknown type " + std::to_string(o.type), false;
    }
    OptionInfo opt;
    opt.name = o.name;
    opt.type = o.type;
    if (o.default_value != nullptr) opt.default_value = o.default_value;
    opt.help = o.help ? o.help : "";
    d->options.push_back(std::move(opt));
  }
  return true;
}

// Names the first NULL among a vtable's mandatory function pointers.
template <typename VTable>
const char* first_null(const VTable* vt, std::initializer_list<std::pair<const char*, const void*>> fns) {
  (void)vt;
  for (const auto& [name, fn] : fns) {
    if (fn == nullptr) return name;
  }
  return nullptr;
}

// The vtable's layout version must cover what was negotiated (plugin.h, at
// loom_negotiate_reply): a reply newer than the vtable would have the host
// read members the plugin never wrote.
bool check_layout_version(const PluginCandidate& c, uint32_t layout, uint32_t chosen, std::string* reason) {
  if (LOOM_ABI_MAJOR_OF(layout) == LOOM_ABI_MAJOR_OF(chosen) && layout >= chosen) return true;
  return *reason = "the plugin chose ABI " + abi_string(chosen) + " but its " + kind_name(c.kind) +
                   " vtable says it is laid out for ABI " + abi_string(layout) +
                   "; the vtable's abi_version must be at least the negotiated one (set it to LOOM_ABI_VERSION "
                   "of the SDK the plugin is built with)",
         false;
}

bool validate_vtable(const PluginCandidate& c, const void* vtable, uint32_t chosen, PluginDescriptor* d,
                     std::string* reason) {
  const char* missing = nullptr;
  if (c.kind == LOOM_KIND_COLLECTIVE) {
    auto* vt = static_cast<const loom_collective_v1*>(vtable);
    if (vt->struct_size < LOOM_COLLECTIVE_V1_0_SIZE) {
      return *reason = "collective vtable struct_size " + std::to_string(vt->struct_size) + " is smaller than v1's " +
                       std::to_string(LOOM_COLLECTIVE_V1_0_SIZE),
             false;
    }
    if (!check_layout_version(c, vt->abi_version, chosen, reason)) return false;
    if (!copy_descriptor(vt->info, c, d, reason)) return false;
    d->vtable_abi_version = vt->abi_version;
    // 1.7's members count only when 1.7 was negotiated and the struct has them.
    const bool v1_7 = chosen >= LOOM_ABI_MAKE(1, 7) && vt->struct_size >= LOOM_COLLECTIVE_V1_7_SIZE;
    d->absent_ops = v1_7 ? vt->absent_ops : 0;
    d->comm_last_error = v1_7 && vt->comm_last_error != nullptr;
    d->comm_stats = chosen >= LOOM_ABI_MAKE(1, 11) && vt->struct_size >= LOOM_COLLECTIVE_V1_11_SIZE &&
                    vt->comm_stats != nullptr;
    if (d->absent_ops & ~LOOM_OP_ALL) {
      char bits[32];
      std::snprintf(bits, sizeof bits, "0x%llx", static_cast<unsigned long long>(d->absent_ops & ~LOOM_OP_ALL));
      return *reason = std::string("absent_ops has bits no operation owns (") + bits +
                       "); valid bits are the LOOM_OP_* of collective.h (0xff)",
             false;
    }
    if (d->absent_ops == LOOM_OP_ALL) return *reason = "absent_ops leaves out every operation", false;
    // A declared optional operation must be there: callers trust the bit.
    if ((d->capabilities & LOOM_CAP_SCALED_ALLREDUCE) &&
        (vt->struct_size < LOOM_COLLECTIVE_V1_3_SIZE || vt->allreduce_scaled == nullptr)) {
      return *reason = "the plugin declares scaled-allreduce but its vtable has no allreduce_scaled (struct_size " +
                       std::to_string(vt->struct_size) + ", ABI 1.3 needs " +
                       std::to_string(LOOM_COLLECTIVE_V1_3_SIZE) + " and a non-NULL function)",
             false;
    }
#define LOOM_FN(f) std::pair<const char*, const void*>(#f, reinterpret_cast<const void*>(vt->f))
    missing = first_null(vt, {LOOM_FN(init), LOOM_FN(fini), LOOM_FN(last_error), LOOM_FN(comm_create),
                              LOOM_FN(comm_destroy), LOOM_FN(comm_abort), LOOM_FN(test), LOOM_FN(wait),
                              LOOM_FN(request_free)});
    // An operation the plugin lists as absent may be NULL; the others not.
    const uint64_t absent = d->absent_ops;
    auto op = [absent](uint64_t bit, const char* name, const void* fn) {
      return std::pair<const char*, const void*>(name, (absent & bit) ? name : fn);
    };
#define LOOM_OP_FN(bit, f) op(bit, #f, reinterpret_cast<const void*>(vt->f))
    if (missing == nullptr) {
      missing = first_null(vt, {LOOM_OP_FN(LOOM_OP_ALLREDUCE, allreduce), LOOM_OP_FN(LOOM_OP_BROADCAST, broadcast),
                                LOOM_OP_FN(LOOM_OP_REDUCE, reduce), LOOM_OP_FN(LOOM_OP_ALLGATHER, allgather),
                                LOOM_OP_FN(LOOM_OP_REDUCE_SCATTER, reduce_scatter),
                                LOOM_OP_FN(LOOM_OP_ALLTOALL, alltoall), LOOM_OP_FN(LOOM_OP_BARRIER, barrier),
                                LOOM_OP_FN(LOOM_OP_SEND_RECV, send), LOOM_OP_FN(LOOM_OP_SEND_RECV, recv)});
    }
#undef LOOM_OP_FN
  } else {
    auto* vt = static_cast<const loom_strategy_v1*>(vtable);
    if (vt->struct_size < LOOM_STRATEGY_V1_0_SIZE) {
      return *reason = "strategy vtable struct_size " + std::to_string(vt->struct_size) + " is smaller than v1's " +
                       std::to_string(LOOM_STRATEGY_V1_0_SIZE),
             false;
    }
    if (!check_layout_version(c, vt->abi_version, chosen, reason)) return false;
    if (!copy_descriptor(vt->info, c, d, reason)) return false;
    d->vtable_abi_version = vt->abi_version;
    missing = first_null(vt, {LOOM_FN(init), LOOM_FN(fini), LOOM_FN(last_error), LOOM_FN(setup), LOOM_FN(teardown),
                              LOOM_FN(data_shard), LOOM_FN(after_backward), LOOM_FN(after_optimizer_step),
                              LOOM_FN(reduce_metric), LOOM_FN(reduce_decision), LOOM_FN(barrier),
                              LOOM_FN(broadcast_bytes), LOOM_FN(is_global_zero), LOOM_FN(global_step),
                              LOOM_FN(should_stop), LOOM_FN(status_line)});
#undef LOOM_FN
  }
  if (missing != nullptr) {
    return *reason = std::string("mandatory function ") + missing + " is NULL in the " + kind_name(c.kind) + " vtable",
           false;
  }
  return true;
}

}  // namespace

bool load_plugin(const PluginCandidate& c, LoadedPlugin* out, std::string* reason) {
  boost::dll::shared_library library;
  try {
    // Absolute path, RTLD_NOW | RTLD_LOCAL: unresolved symbols fail here, not mid-run.
    library.load(boost::dll::fs::path(c.path), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    // Boost wraps dlerror's text, which names the real problem; keep just that.
    std::string text = e.what();
    const std::string marker = "dlerror system message: ";
    if (auto at = text.find(marker); at != std::string::npos) {
      text = text.substr(at + marker.size());
      if (auto close = text.rfind(')'); close != std::string::npos) text = text.substr(0, close);
      if (text.rfind(c.path + ": ", 0) == 0) text = text.substr(c.path.size() + 2);
    }
    *reason = "cannot be loaded: " + text;
    return false;
  }
  const std::string symbol = entry_symbol(c.kind);
  if (!library.has(symbol)) {
    *reason = explain_missing_entry(c);
    return false;
  }
  auto entry = library.get<loom_status(const loom_negotiate_request*, loom_negotiate_reply*)>(symbol);

  loom_negotiate_request request{sizeof(loom_negotiate_request), c.kind, LOOM_ABI_VERSION_MIN, LOOM_ABI_VERSION};
  loom_negotiate_reply reply{};
  reply.struct_size = sizeof(loom_negotiate_reply);
  const std::string host_range = abi_string(LOOM_ABI_VERSION_MIN) + " to " + abi_string(LOOM_ABI_VERSION);
  loom_status status = entry(&request, &reply);
  if (status != LOOM_OK) {
    *reason = "refused negotiation (" + std::string(loom_status_name(status)) + "): " +
              (reply.refusal ? reply.refusal : "no reason given") + "; this host speaks ABI " + host_range;
    return false;
  }
  if (reply.abi_version < LOOM_ABI_VERSION_MIN || reply.abi_version > LOOM_ABI_VERSION) {
    *reason = "plugin chose ABI " + abi_string(reply.abi_version) + " but this host speaks ABI " + host_range;
    return false;
  }
  if (reply.vtable == nullptr) {
    *reason = "negotiation returned LOOM_OK with a NULL vtable";
    return false;
  }
  PluginDescriptor descriptor;
  if (!validate_vtable(c, reply.vtable, reply.abi_version, &descriptor, reason)) return false;
  descriptor.abi_version = reply.abi_version;

  out->warnings.clear();
  if (auto extra = extra_plugin_exports(c.path); !extra.empty()) {
    std::string names;
    for (size_t i = 0; i < extra.size() && i < 3; ++i) names += (i ? ", " : "") + excerpt(extra[i]);
    if (extra.size() > 3) names += " and " + std::to_string(extra.size() - 3) + " more";
    // Not broken: it works, but its symbols may interpose on the host's or
    // other plugins' (DESIGN.md: a plugin exports its entry point only).
    out->warnings.push_back("plugin file " + c.path + " exports " + std::to_string(extra.size()) +
                            " symbol(s) besides its entry point " + symbol + ": " + names +
                            "; build it with -fvisibility=hidden and link it with the Loom SDK's version script "
                            "(-Wl,--version-script=<libdir>/cmake/LoomSDK/plugin.map; LoomSDK's loom_sdk_add_plugin "
                            "does both)");
  }
  out->candidate = c;
  out->descriptor = std::move(descriptor);
  out->vtable = reply.vtable;
  keep_resident(std::move(library));
  return true;
}

}  // namespace loom
