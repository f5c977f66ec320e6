// SPDX-License-Identifier: Apache-2.0
#include "host_oob.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace loom {

Status store_allgather(Store* store, const std::string& prefix, int32_t rank, int32_t size, const void* send,
                       size_t len, void* recv, int64_t timeout_ms) {
  auto bytes = static_cast<const uint8_t*>(send);
  Status s = store->set(prefix + std::to_string(rank), std::vector<uint8_t>(bytes, bytes + len));
  if (!s.is_ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int32_t r = 0; r < size; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    std::vector<uint8_t> value;
    s = store->get(prefix + std::to_string(r), &value, std::max(left, std::chrono::milliseconds(1)));
    if (!s.is_ok()) return s;
    if (value.size() != len) {
      return Status(LOOM_ERR_INVALID_ARGUMENT, "out-of-band exchange: rank " + std::to_string(r) + " sent " +
                                                   std::to_string(value.size()) + " bytes, this rank " +
                                                   std::to_string(len));
    }
    if (len > 0) std::memcpy(static_cast<uint8_t*>(recv) + size_t(r) * len, value.data(), len);
  }
  return Status::ok();
}

struct OobHandles::Handle {
  loom_oob_v1 table{};
  OobHandles* owner = nullptr;
  std::string prefix;  // loom/oob/<kind>/<plugin>/<scope>/<open>/
  int32_t rank = 0;
  int32_t size = 1;
  uint64_t calls = 0;  // exchanges run on this handle: the last part of their keys
};

// Out of line: Handle is complete only here.
OobHandles::OobHandles(std::string owner, StoreGetter store) : owner_(std::move(owner)), store_(std::move(store)) {}
OobHandles::~OobHandles() = default;

namespace {

bool valid_scope(const char* scope) {
  if (scope == nullptr) return false;
  const size_t n = std::strlen(scope);
  if (n == 0 || n > 200) return false;
  return std::all_of(scope, scope + n, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '/' || c == '-';
  });
}

}  // namespace

loom_status OobHandles::open(const char* scope, int32_t rank, int32_t size, const loom_oob_v1** oob,
                             std::string* why) {
  if (oob == nullptr) return *why = "oob_open: oob is NULL", LOOM_ERR_INVALID_ARGUMENT;
  *oob = nullptr;
  if (!valid_scope(scope)) {
    return *why = "oob_open: scope must be 1 to 200 characters of [A-Za-z0-9_./-]", LOOM_ERR_INVALID_ARGUMENT;
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return *why = "oob_open: rank " + std::to_string(rank) + " of size " + std::to_string(size) +
                  " is not a member (0 <= rank < size, size >= 1)",
           LOOM_ERR_INVALID_ARGUMENT;
  }
  auto handle = std::make_unique<Handle>();
  handle->table.struct_size = sizeof(loom_oob_v1);
  handle->table.user = handle.get();
  handle->table.allgather = &OobHandles::allgather;
  handle->owner = this;
  handle->rank = rank;
  handle->size = size;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t nth = opened_[scope]++;  // equal on every member: each opens the scope in the same order
  handle->prefix = "loom/oob/" + owner_ + "/" + scope + "/" + std::to_string(nth) + "/";
  *oob = &handle->table;
  handles_[*oob] = std::move(handle);
  return LOOM_OK;
}

void OobHandles::close(const loom_oob_v1* oob) {
  std::lock_guard<std::mutex> lock(mutex_);
  handles_.erase(oob);
}

loom_status OobHandles::allgather(void* user, const void* send, size_t len, void* recv, int64_t timeout_ms) {
  auto* h = static_cast<Handle*>(user);
  if (h == nullptr || (len > 0 && (send == nullptr || recv == nullptr)) || timeout_ms < 0)
    return LOOM_ERR_INVALID_ARGUMENT;
  const uint64_t call = h->calls++;  // one thread at a time per handle (plugin.h)
  if (h->size == 1) {
    if (len > 0) std::memmove(recv, send, len);
    return LOOM_OK;
  }
  try {
    // Asked only now: a collective that bootstraps itself (mpi) never calls
    // the exchange, and needs no store.
    Store* store = h->owner->store_();
    if (store == nullptr) {
      spdlog::warn("[{}] out-of-band exchange among {} members: the job has no rendezvous store (set MASTER_ADDR "
                   "and MASTER_PORT, or start the job with loom launch)",
                   h->owner->owner_, h->size);
      return LOOM_ERR_UNAVAILABLE;
    }
    const std::string prefix = h->prefix + std::to_string(call) + "/";
    Status s = store_allgather(store, prefix, h->rank, h->size, send, len, recv, timeout_ms);
    if (!s.is_ok()) spdlog::warn("[{}] out-of-band exchange {}: {}", h->owner->owner_, prefix, s.message());
    return s.code();
  } catch (const std::exception& e) {  // nothing may unwind into the plugin
    spdlog::warn("[{}] out-of-band exchange failed: {}", h->owner->owner_, e.what());
    return LOOM_ERR_SYSTEM;
  }
}

}  // namespace loom
