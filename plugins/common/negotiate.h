/* SPDX-License-Identifier: Apache-2.0 */
// The negotiation every plugin's entry symbol performs, in one place: check
// the host's request, choose the newest ABI version both sides speak (and no
// older than the plugin's lowest), and answer with the plugin's static
// vtable or a static refusal. Header-only, so nothing is exported; static
// answers only, because the host may call an entry in a scanner process
// just to list the plugin (no allocation, no blocking, no side effects).
#ifndef LOOM_PLUGINS_COMMON_NEGOTIATE_H
#define LOOM_PLUGINS_COMMON_NEGOTIATE_H

#include <cstddef>

#include "loom/plugin.h"

// "1.0 to 1.6": the versions a plugin built with this SDK speaks, as text
// for its refusal (kept in step with LOOM_ABI_MINOR).
#define LOOM_PLUGIN_STR2(x) #x
#define LOOM_PLUGIN_STR(x) LOOM_PLUGIN_STR2(x)
#define LOOM_PLUGIN_ABI_RANGE "1.0 to 1." LOOM_PLUGIN_STR(LOOM_ABI_MINOR)

namespace loom_plugin_common {

// What a plugin says when it refuses; each string is static.
struct Refusals {
  const char *bad_request;        // request missing or smaller than v1's
  const char *wrong_kind;         // called for another plugin kind
  const char *no_common_version;  // e.g. "ucx collective plugin speaks Loom ABI 1.0 to 1.1"
};

inline loom_status negotiate(const loom_negotiate_request *request, loom_negotiate_reply *reply, loom_kind kind,
                             uint32_t lowest, const void *vtable, const Refusals &refusals) {
  if (reply == nullptr) return LOOM_ERR_INVALID_ARGUMENT;
  // The host sets struct_size to what it allocated: write only what fits.
  auto answer = [reply](loom_status s, uint32_t version, const void *vt, const char *refusal) {
    if (reply->struct_size >= offsetof(loom_negotiate_reply, abi_version) + sizeof reply->abi_version)
      reply->abi_version = version;
    if (reply->struct_size >= offsetof(loom_negotiate_reply, vtable) + sizeof reply->vtable) reply->vtable = vt;
    if (reply->struct_size >= offsetof(loom_negotiate_reply, refusal) + sizeof reply->refusal)
      reply->refusal = refusal;
    return s;
  };
  if (request == nullptr || request->struct_size < sizeof(loom_negotiate_request))
    return answer(LOOM_ERR_UNSUPPORTED, 0, nullptr, refusals.bad_request);
  if (request->kind != kind) return answer(LOOM_ERR_UNSUPPORTED, 0, nullptr, refusals.wrong_kind);
  // Minor versions only append, so one vtable serves every version it chooses.
  const uint32_t chosen = request->abi_max < LOOM_ABI_VERSION ? request->abi_max : LOOM_ABI_VERSION;
  if (LOOM_ABI_MAJOR_OF(chosen) != LOOM_ABI_MAJOR || chosen < lowest || chosen < request->abi_min)
    return answer(LOOM_ERR_UNSUPPORTED, 0, nullptr, refusals.no_common_version);
  return answer(LOOM_OK, chosen, vtable, nullptr);
}

}  // namespace loom_plugin_common

#endif  // LOOM_PLUGINS_COMMON_NEGOTIATE_H
