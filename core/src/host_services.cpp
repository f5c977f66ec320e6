// SPDX-License-Identifier: Apache-2.0
#include "host_services.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "loom/host.hpp"
#include "stop.hpp"

namespace loom {
namespace {

PluginHostContext* self(void* host_ctx) { return static_cast<PluginHostContext*>(host_ctx); }

// Host services are called from plugin code: no exception may escape.
template <typename F>
loom_status no_throw(F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    spdlog::error("host service failed: {}", e.what());
    return LOOM_ERR_INTERNAL;
  } catch (...) {
    return LOOM_ERR_INTERNAL;
  }
}

void host_log(void* host_ctx, loom_log_level level, const char* message) {
  static const spdlog::level::level_enum kLevels[] = {spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
                                                      spdlog::level::warn, spdlog::level::err};
  auto lvl = (level >= 0 && level <= LOOM_LOG_ERROR) ? kLevels[level] : spdlog::level::err;
  spdlog::log(lvl, "[{}] {}", self(host_ctx)->label, message ? message : "(null)");
}

loom_status host_get_option(void* host_ctx, const char* name, const char** value) {
  if (name == nullptr || value == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  auto& values = self(host_ctx)->values;
  auto it = values.find(name);
  if (it == values.end()) {
    *value = nullptr;
    return LOOM_ERR_INVALID_ARGUMENT;  // undeclared; required-and-unset never gets this far
  }
  *value = it->second.c_str();
  return LOOM_OK;
}

Store* store_of(void* host_ctx) {
  Host* host = self(host_ctx)->host;
  if (host == nullptr) return nullptr;
  try {
    return host->store();
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    spdlog::error("[{}] rendezvous store unavailable: {}", self(host_ctx)->label, e.what());
    return nullptr;
  }
}

loom_status host_store_set(void* host_ctx, const char* key, const void* value, size_t len) {
  return no_throw([&]() -> loom_status {
  if (key == nullptr || (value == nullptr && len > 0)) return LOOM_ERR_INVALID_ARGUMENT;
  Store* store = store_of(host_ctx);
  if (store == nullptr) return LOOM_ERR_UNAVAILABLE;
  auto bytes = static_cast<const uint8_t*>(value);
  return store->set(key, std::vector<uint8_t>(bytes, bytes + len)).code();
  });
}

loom_status host_store_get(void* host_ctx, const char* key, void* buf, size_t capacity, size_t* len,
                           int64_t timeout_ms) {
  return no_throw([&]() -> loom_status {
  if (key == nullptr || len == nullptr || (buf == nullptr && capacity > 0)) return LOOM_ERR_INVALID_ARGUMENT;
  Host* host = self(host_ctx)->host;
  Store* store = store_of(host_ctx);
  if (store == nullptr) return LOOM_ERR_UNAVAILABLE;
  auto timeout = timeout_ms < 0 ? host->config().store_timeout : std::chrono::milliseconds(timeout_ms);
  std::vector<uint8_t> value;
  Status s = store->get(key, &value, timeout);
  if (!s.is_ok()) return s.code();
  *len = value.size();
  if (value.size() > capacity) return LOOM_ERR_INVALID_ARGUMENT;
  if (!value.empty()) std::memcpy(buf, value.data(), value.size());
  return LOOM_OK;
  });
}

loom_status host_store_add(void* host_ctx, const char* key, int64_t delta, int64_t* result) {
  return no_throw([&]() -> loom_status {
  if (key == nullptr || result == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  Store* store = store_of(host_ctx);
  if (store == nullptr) return LOOM_ERR_UNAVAILABLE;
  return store->add(key, delta, result).code();
  });
}

loom_status host_open_plugin(void* host_ctx, loom_kind kind, const char* name, const void** vtable, void** instance) {
  if (name == nullptr || vtable == nullptr || instance == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  auto* ctx = self(host_ctx);
  if (ctx->host == nullptr) return LOOM_ERR_UNAVAILABLE;
  if (kind != LOOM_KIND_COLLECTIVE) return LOOM_ERR_UNSUPPORTED;  // strategies are opened by the trainer only
  try {
    // The strategy's `listen` reaches the collective it opens, so one setting
    // confines every socket of a peer (the collective's listeners included);
    // without one, a job of `loom launch` listens where its store does
    // (LOOM_LISTEN, its --master-addr). The collective's own option wins.
    std::map<std::string, std::string> inherited;
    if (auto it = ctx->values.find("listen"); it != ctx->values.end()) {
      inherited["listen"] = it->second;
    } else if (const char* launch_listen = std::getenv("LOOM_LISTEN"); launch_listen && *launch_listen) {
      inherited["listen"] = launch_listen;
    }
    InheritedOptions scope(std::move(inherited));
    auto collective = ctx->host->open_collective(name);
    *vtable = &collective->vtable();
    *instance = collective->ctx();
    std::lock_guard<std::mutex> lock(ctx->children_mutex);
    ctx->children[*instance] = std::move(collective);
    return LOOM_OK;
  } catch (const Error& e) {
    spdlog::error("[{}] cannot open collective plugin '{}': {}", ctx->label, name, e.what());
    std::lock_guard<std::mutex> lock(ctx->children_mutex);
    ctx->open_error = std::make_shared<Error>(e);  // the host reports it with its exit code
    return LOOM_ERR_UNAVAILABLE;
  } catch (const std::exception& e) {
    spdlog::error("[{}] cannot open collective plugin '{}': {}", ctx->label, name, e.what());
    return LOOM_ERR_UNAVAILABLE;
  }
}

void host_close_plugin(void* host_ctx, void* instance) {
  auto* ctx = self(host_ctx);
  std::shared_ptr<Collective> doomed;  // fini runs outside the lock
  std::lock_guard<std::mutex> lock(ctx->children_mutex);
  auto it = ctx->children.find(instance);
  if (it != ctx->children.end()) {
    doomed = std::move(it->second);
    ctx->children.erase(it);
  }
}

bool parse_full(const std::string& text, bool is_int) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  if (is_int) {
    (void)std::strtoll(text.c_str(), &end, 10);
  } else {
    (void)std::strtod(text.c_str(), &end);
  }
  return errno == 0 && *end == '\0';
}

loom_status host_oob_open(void* host_ctx, const char* scope, int32_t rank, int32_t size, const loom_oob_v1** oob) {
  return no_throw([&]() -> loom_status {
    std::string why;
    loom_status s = self(host_ctx)->oob->open(scope, rank, size, oob, &why);
    // The plugin sees only the code; the reason goes to the log.
    if (s != LOOM_OK) spdlog::warn("[{}] {}", self(host_ctx)->label, why);
    return s;
  });
}

void host_oob_close(void* host_ctx, const loom_oob_v1* oob) {
  if (oob != nullptr) self(host_ctx)->oob->close(oob);
}

int32_t host_stop_requested(void*) { return stop_signal() != 0 ? 1 : 0; }

}  // namespace

namespace {
thread_local const InheritedOptions* t_inherited = nullptr;
}  // namespace

InheritedOptions::InheritedOptions(std::map<std::string, std::string> values)
    : values_(std::move(values)), outer_(t_inherited) {
  t_inherited = this;
}

InheritedOptions::~InheritedOptions() { t_inherited = outer_; }

const std::map<std::string, std::string>& InheritedOptions::current() {
  static const std::map<std::string, std::string> kNone;
  return t_inherited ? t_inherited->values_ : kNone;
}

std::string check_option_value(const OptionInfo& option, const std::string& value) {
  switch (option.type) {
    case LOOM_OPTION_BOOL:
      return (value == "true" || value == "false") ? "" : "expected true or false";
    case LOOM_OPTION_INT:
      return parse_full(value, true) ? "" : "expected an integer";
    case LOOM_OPTION_FLOAT:
      return parse_full(value, false) ? "" : "expected a number";
    default:
      return "";
  }
}

std::unique_ptr<PluginHostContext> make_host_context(Host* host, const PluginCandidate& candidate,
                                                     const PluginDescriptor& descriptor,
                                                     const std::map<std::string, std::string>& configured,
                                                     int32_t rank, int32_t world_size, int32_t local_rank,
                                                     const std::map<std::string, std::string>* sources) {
  auto ctx = std::make_unique<PluginHostContext>();
  auto at = [sources](const std::string& key) -> std::string {
    if (sources == nullptr) return "";
    auto it = sources->find(key);
    return it == sources->end() ? "" : it->second + ": ";
  };
  ctx->host = host;
  ctx->label = std::string(kind_name(candidate.kind)) + " '" + descriptor.name + "'";
  for (const auto& [key, value] : configured) {
    const OptionInfo* option = descriptor.find_option(key);
    if (option == nullptr) {
      std::string valid;
      for (const auto& o : descriptor.options) valid += (valid.empty() ? "" : ", ") + o.name;
      throw Error::usage(at(key) + "unknown option '" + excerpt(key) + "' for " + ctx->label + "; valid options: " +
                         (valid.empty() ? "(none)" : valid));
    }
    if (auto why = check_option_value(*option, value); !why.empty()) {
      throw Error::usage(at(key) + "option '" + key + "' of " + ctx->label + " has value '" + excerpt(value) + "': " + why + " (" +
                         option_type_name(option->type) + ")");
    }
  }
  for (const auto& option : descriptor.options) {
    auto it = configured.find(option.name);
    if (it != configured.end()) {
      ctx->values[option.name] = it->second;
    } else if (option.default_value) {
      ctx->values[option.name] = *option.default_value;
    } else {
      throw Error::usage("option '" + option.name + "' of " + ctx->label + " is required: " + option.help);
    }
  }
  loom_host_v1& t = ctx->table;
  t.struct_size = sizeof(loom_host_v1);
  t.abi_version = descriptor.abi_version;
  t.host_ctx = ctx.get();
  t.log = host_log;
  t.get_option = host_get_option;
  t.store_set = host_store_set;
  t.store_get = host_store_get;
  t.store_add = host_store_add;
  t.open_plugin = host_open_plugin;
  t.close_plugin = host_close_plugin;
  t.rank = rank;
  t.world_size = world_size;
  t.local_rank = local_rank;
  PluginHostContext* raw = ctx.get();
  ctx->oob = std::make_unique<OobHandles>(std::string(kind_name(candidate.kind)) + "/" + descriptor.name,
                                          [raw]() { return store_of(raw); });
  t.oob_open = host_oob_open;
  t.oob_close = host_oob_close;
  t.stop_requested = host_stop_requested;
  return ctx;
}

}  // namespace loom
