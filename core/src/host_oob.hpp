// SPDX-License-Identifier: Apache-2.0
// The out-of-band exchange over the job's store: the one the host hands a
// collective it creates communicators of, and the handles a plugin opens
// itself through loom_host_v1.oob_open (ABI 1.7).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "loom/collective.h"
#include "loom/status.hpp"
#include "loom/store.hpp"

namespace loom {

// One allgather among size members: rank's len bytes go to prefix + rank,
// then every member's are read into recv in rank order, all within
// timeout_ms. A member that wrote another length is INVALID_ARGUMENT.
Status store_allgather(Store* store, const std::string& prefix, int32_t rank, int32_t size, const void* send,
                       size_t len, void* recv, int64_t timeout_ms);

// The handles one plugin opened with oob_open; closed with it at the latest.
class OobHandles {
 public:
  // Where a handle finds the store when it first needs it (NULL: none).
  using StoreGetter = std::function<Store*()>;

  OobHandles(std::string owner, StoreGetter store);
  ~OobHandles();
  OobHandles(const OobHandles&) = delete;
  OobHandles& operator=(const OobHandles&) = delete;

  // oob_open's contract (plugin.h); *why says what was wrong.
  loom_status open(const char* scope, int32_t rank, int32_t size, const loom_oob_v1** oob, std::string* why);
  void close(const loom_oob_v1* oob);

 private:
  struct Handle;
  static loom_status allgather(void* user, const void* send, size_t len, void* recv, int64_t timeout_ms);

  const std::string owner_;  // "strategy/ddp": keys of different plugins never meet
  StoreGetter store_;
  std::mutex mutex_;
  std::map<std::string, uint64_t> opened_;  // per scope: how often this process opened it
  std::map<const loom_oob_v1*, std::unique_ptr<Handle>> handles_;
};

}  // namespace loom
