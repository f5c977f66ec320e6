// SPDX-License-Identifier: Apache-2.0
#include "loom/plugin_record.hpp"

#include <cstdio>

#include "loom/collective.h"
#include "loom/strategy.h"

namespace loom {

const char* kind_name(loom_kind kind) {
  switch (kind) {
    case LOOM_KIND_COLLECTIVE: return "collective";
    case LOOM_KIND_STRATEGY: return "strategy";
    default: return "unknown";
  }
}

std::optional<loom_kind> parse_kind(const std::string& word) {
  if (word == "collective") return LOOM_KIND_COLLECTIVE;
  if (word == "strategy") return LOOM_KIND_STRATEGY;
  return std::nullopt;
}

const char* option_type_name(loom_option_type type) {
  switch (type) {
    case LOOM_OPTION_BOOL: return "bool";
    case LOOM_OPTION_INT: return "int";
    case LOOM_OPTION_FLOAT: return "float";
    case LOOM_OPTION_STRING: return "string";
    case LOOM_OPTION_STRING_LIST: return "string list";
    default: return "unknown";
  }
}

std::string abi_string(uint32_t version) {
  return std::to_string(LOOM_ABI_MAJOR_OF(version)) + "." + std::to_string(LOOM_ABI_MINOR_OF(version));
}

std::vector<std::string> op_names(uint64_t ops) {
  static const std::pair<uint64_t, const char*> kOps[] = {
      {LOOM_OP_ALLREDUCE, "allreduce"}, {LOOM_OP_BROADCAST, "broadcast"},
      {LOOM_OP_REDUCE, "reduce"},       {LOOM_OP_ALLGATHER, "allgather"},
      {LOOM_OP_REDUCE_SCATTER, "reduce_scatter"}, {LOOM_OP_ALLTOALL, "alltoall"},
      {LOOM_OP_BARRIER, "barrier"},     {LOOM_OP_SEND_RECV, "send/recv"}};
  std::vector<std::string> names;
  for (const auto& [bit, name] : kOps)
    if (ops & bit) names.push_back(name);
  return names;
}

std::vector<std::string> capability_names(loom_kind kind, uint64_t capabilities) {
  std::vector<std::string> names;
  if (kind == LOOM_KIND_STRATEGY) {
    if (capabilities & LOOM_CAP_HEALS_NONFINITE) names.push_back("heals-nonfinite");
    if (capabilities & LOOM_CAP_DEVICE_MEMORY) names.push_back("device-memory");
    if (uint64_t rest = capabilities & ~(LOOM_CAP_HEALS_NONFINITE | LOOM_CAP_DEVICE_MEMORY); rest != 0) {
      char text[32];
      std::snprintf(text, sizeof text, "unknown-0x%llx", static_cast<unsigned long long>(rest));
      names.push_back(text);
    }
    return names;
  }
  if (kind != LOOM_KIND_COLLECTIVE) {
    if (capabilities != 0) names.push_back("0x" + std::to_string(capabilities));
    return names;
  }
  static const std::pair<uint64_t, const char*> kNames[] = {
      {LOOM_CAP_HOST_MEMORY, "host-memory"},       {LOOM_CAP_CUDA_MEMORY, "cuda-memory"},
      {LOOM_CAP_ASYNC_PROGRESS, "async-progress"}, {LOOM_CAP_DYNAMIC_GROUPS, "dynamic-groups"},
      {LOOM_CAP_ABORT, "abort"},                   {LOOM_CAP_PEER_FAILURE, "peer-failure"},
      {LOOM_CAP_INLINE_COMPLETION, "inline-completion"}, {LOOM_CAP_SCALED_ALLREDUCE, "scaled-allreduce"},
  };
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (capabilities & bit) names.push_back(name);
  }
  if (uint64_t rest = capabilities & ~known; rest != 0) {
    char text[32];
    std::snprintf(text, sizeof text, "unknown-0x%llx", static_cast<unsigned long long>(rest));
    names.push_back(text);
  }
  return names;
}

const OptionInfo* PluginDescriptor::find_option(const std::string& option) const {
  for (const auto& o : options) {
    if (o.name == option) return &o;
  }
  return nullptr;
}

std::string PluginRecord::status_text() const {
  switch (state) {
    case State::kOk: return "ok";
    case State::kUnavailable: return "unavailable: " + reason;
    case State::kBroken: return "broken: " + reason;
    case State::kShadowed: return "shadowed: " + reason;
  }
  return "broken: " + reason;
}

}  // namespace loom
