// SPDX-License-Identifier: Apache-2.0
// Loom C++ plugin layer: the plugin's copy of the host's table, and reading
// the options a plugin declares
// (loom_plugin_info.options) through the host's get_option, with the type
// and range checks each needs. Header-only.
//
// The rules: the host answers with the configured text or the declared
// default; a host that cannot answer (no get_option, or a failure) gets the
// declared default and a warning in its log, so that a plugin still starts.
// A value that does not parse, or is out of range, is the user's mistake:
// INVALID_ARGUMENT, with a message (fail, errors.hpp) that names the option
// and quotes the value.
#ifndef LOOM_CXX_OPTIONS_HPP
#define LOOM_CXX_OPTIONS_HPP

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/cxx/errors.hpp"
#include "loom/plugin.h"

namespace loom {
namespace cxx {

// The plugin's copy of the host's table, as plugin.h's struct_size rule
// asks: only what the host filled in is read; later fields stay zero, and
// job fields an older host did not give are -1 ("unknown").
inline loom_host_v1 copy_host(const loom_host_v1 &host) noexcept {
  loom_host_v1 c;
  std::memset(&c, 0, sizeof c);
  c.rank = c.world_size = c.local_rank = -1;
  std::memcpy(&c, &host, host.struct_size < sizeof c ? host.struct_size : sizeof c);
  c.struct_size = sizeof c;
  return c;
}

class Options {
 public:
  // host: the table init received (or the plugin's struct_size-aware copy of
  // it); it must outlive this reader.
  explicit Options(const loom_host_v1 &host) noexcept : host_(host) {}

  // The option's text: the host's answer, else the declared default (with a
  // warning). Never NULL.
  const char *text(const loom_option_decl &decl) const {
    const char *fallback = decl.default_value ? decl.default_value : "";
    if (!host_.get_option) return fallback;
    const char *value = nullptr;
    const loom_status s = host_.get_option(host_.host_ctx, decl.name, &value);
    if (s == LOOM_OK && value) return value;
    if (host_.log) {
      char message[512];
      std::snprintf(message, sizeof message, "host could not give option %s (%s); using the default %s", decl.name,
                    loom_status_name(s), fallback);
      host_.log(host_.host_ctx, LOOM_LOG_WARN, message);
    }
    return fallback;
  }

  // "true" or "false", nothing else.
  loom_status get_bool(const loom_option_decl &decl, bool *out) const {
    const char *t = text(decl);
    if (std::strcmp(t, "true") == 0 || std::strcmp(t, "false") == 0) {
      *out = t[0] == 't';
      return LOOM_OK;
    }
    return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s: \"%s\" is not true or false", decl.name, t);
  }

  // A whole decimal number >= min_value (and <= max_value).
  loom_status get_int(const loom_option_decl &decl, int64_t min_value, int64_t *out,
                      int64_t max_value = INT64_MAX) const {
    const char *t = text(decl);
    errno = 0;
    char *end = nullptr;
    const long long v = std::strtoll(t, &end, 10);
    if (errno != 0 || end == t || *end != '\0' || v < min_value || v > max_value) {
      if (max_value == INT64_MAX)
        return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s = \"%s\" is not an integer >= %lld", decl.name, t,
                    static_cast<long long>(min_value));
      return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s = \"%s\" is not an integer in [%lld, %lld]", decl.name, t,
                  static_cast<long long>(min_value), static_cast<long long>(max_value));
    }
    *out = v;
    return LOOM_OK;
  }

  // A finite number in (above, at_most]: above is exclusive, so that "> 0"
  // can be said; NaN and infinities are refused.
  loom_status get_double(const loom_option_decl &decl, double above, double at_most, double *out) const {
    const char *t = text(decl);
    errno = 0;
    char *end = nullptr;
    const double v = std::strtod(t, &end);
    if (errno != 0 || end == t || *end != '\0' || !std::isfinite(v) || !(v > above) || !(v <= at_most))
      return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s = \"%s\" is not a number > %.15g (and <= %.15g)", decl.name, t,
                  above, at_most);
    *out = v;
    return LOOM_OK;
  }

  // Any text; non_empty refuses "" with a message that says what to name.
  loom_status get_string(const loom_option_decl &decl, std::string *out, const char *non_empty = nullptr) const {
    *out = text(decl);
    if (non_empty && out->empty())
      return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s is empty; %s", decl.name, non_empty);
    return LOOM_OK;
  }

  // A comma-separated list (LOOM_OPTION_STRING_LIST): the items, trimmed of
  // blanks; "" is the empty list. An empty item ("a,,b") is refused.
  loom_status get_list(const loom_option_decl &decl, std::vector<std::string> *out) const {
    const std::string t = text(decl);
    out->clear();
    if (t.find_first_not_of(" \t") == std::string::npos) return LOOM_OK;
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = t.find(',', start);
      std::string item = t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const std::size_t first = item.find_first_not_of(" \t");
      if (first == std::string::npos)
        return fail(LOOM_ERR_INVALID_ARGUMENT, "option %s = \"%s\" has an empty item", decl.name, t.c_str());
      item = item.substr(first, item.find_last_not_of(" \t") - first + 1);
      out->push_back(item);
      if (comma == std::string::npos) return LOOM_OK;
      start = comma + 1;
    }
  }

 private:
  const loom_host_v1 &host_;
};

// The table of declared options must follow the plugin's index enum: a
// swapped pair compiles and silently reads one option's value for another.
// static_assert(loom::cxx::same_name(kOptions[kOptX].name, "x"), ...).
constexpr bool same_name(const char *a, const char *b) {
  return *a == *b && (*a == '\0' || same_name(a + 1, b + 1));
}

}  // namespace cxx
}  // namespace loom

#endif  // LOOM_CXX_OPTIONS_HPP
