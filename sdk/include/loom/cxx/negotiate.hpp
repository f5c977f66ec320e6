// SPDX-License-Identifier: Apache-2.0
// Loom C++ plugin layer: the negotiation every plugin's entry symbol performs
// (plugin.h), in one place. It checks the host's request, chooses the newest
// ABI version both sides speak (and no older than the plugin's lowest), and
// answers with the plugin's static vtable or a static refusal, writing only
// the reply fields the host's struct_size covers. Static answers only: the
// host may call an entry in a scanner process just to list the plugin, so
// nothing here allocates, blocks or has side effects. Header-only; the
// entry macros (LOOM_CXX_COLLECTIVE_ENTRY in collective.hpp,
// LOOM_CXX_STRATEGY_ENTRY in strategy.hpp) are the usual way in.
#ifndef LOOM_CXX_NEGOTIATE_HPP
#define LOOM_CXX_NEGOTIATE_HPP

#include <cstddef>
#include <cstdint>

#include "loom/plugin.h"

// "1.0 to 1.7": the versions a plugin built with this SDK speaks, as text for
// its refusal (follows LOOM_ABI_MINOR).
#define LOOM_CXX_STR2(x) #x
#define LOOM_CXX_STR(x) LOOM_CXX_STR2(x)
#define LOOM_CXX_ABI_RANGE "1.0 to 1." LOOM_CXX_STR(LOOM_ABI_MINOR)

// The three refusals of a plugin, from its name as a string literal ("mpi
// collective plugin") and its kind's word ("collective").
#define LOOM_CXX_REFUSALS(who, kind_word)                                                   \
  ::loom::cxx::Refusals {                                                                   \
    who ": the negotiate request is missing or too small for ABI v1",                      \
        who ": called for a kind other than " kind_word, who " speaks Loom ABI " LOOM_CXX_ABI_RANGE \
  }

namespace loom {
namespace cxx {

// What a plugin says when it refuses; each string is static.
struct Refusals {
  const char *bad_request;        // request missing or smaller than v1's
  const char *wrong_kind;         // called for another plugin kind
  const char *no_common_version;  // e.g. "ucx collective plugin speaks Loom ABI 1.0 to 1.7"
};

// Answers the host's request for a plugin of `kind` whose oldest spoken
// version is `lowest` (LOOM_ABI_VERSION_MIN for a plugin that handles every
// minor version since 1.0) and whose newest is this SDK's LOOM_ABI_VERSION.
// Minor versions only append, so one vtable serves every version chosen.
inline loom_status negotiate(const loom_negotiate_request *request, loom_negotiate_reply *reply, loom_kind kind,
                             uint32_t lowest, const void *vtable, const Refusals &refusals) noexcept {
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
  const uint32_t chosen = request->abi_max < LOOM_ABI_VERSION ? request->abi_max : LOOM_ABI_VERSION;
  if (LOOM_ABI_MAJOR_OF(chosen) != LOOM_ABI_MAJOR || chosen < lowest || chosen < request->abi_min)
    return answer(LOOM_ERR_UNSUPPORTED, 0, nullptr, refusals.no_common_version);
  return answer(LOOM_OK, chosen, vtable, nullptr);
}

}  // namespace cxx
}  // namespace loom

#endif  // LOOM_CXX_NEGOTIATE_HPP
