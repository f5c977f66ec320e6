// SPDX-License-Identifier: Apache-2.0
// The store-backed out-of-band allgather.
#include "oob.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "error.h"

namespace loom_ddp {
namespace {

std::atomic<uint64_t> g_sequence{0};

}  // namespace

StoreOob::StoreOob(const loom_host_v1 *host, int32_t rank, int32_t size) : host_(host), rank_(rank), size_(size) {
  std::memset(&table_, 0, sizeof table_);
  table_.struct_size = sizeof table_;
  table_.user = this;
  table_.allgather = &StoreOob::allgather;
}

loom_status StoreOob::allgather(void *user, const void *send, size_t len, void *recv, int64_t timeout_ms) noexcept {
  auto *self = static_cast<StoreOob *>(user);
  if (!self) return LOOM_ERR_INVALID_ARGUMENT;
  const loom_status s = guarded([&]() -> loom_status { return self->run(send, len, recv, timeout_ms); });
  if (s != LOOM_OK && self->error_.empty()) self->error_ = last_error_text();
  return s;
}

loom_status StoreOob::failed(loom_status s, std::string message) {
  error_ = "out-of-band allgather over the job's store: " + message;
  return fail(s, "%s", error_.c_str());
}

loom_status StoreOob::run(const void *send, size_t len, void *recv, int64_t timeout_ms) {
  error_.clear();
  if ((len > 0 && (!send || !recv)) || timeout_ms < 0)
    return failed(LOOM_ERR_INVALID_ARGUMENT, "called with NULL buffers or a negative timeout");
  if (size_ == 1) {  // a job of one process needs no store (one GPU, one rank of nccl)
    if (len > 0) std::memmove(recv, send, len);
    return LOOM_OK;
  }
  if (!LOOM_HOST_HAS(host_, store_set) || !LOOM_HOST_HAS(host_, store_get))
    return failed(LOOM_ERR_UNAVAILABLE, "the host offers no rendezvous store");
  const uint64_t seq = g_sequence.fetch_add(1);
  const std::string prefix = "ddp/oob/" + std::to_string(seq) + "/";  // a plugin's keys start with its name
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);

  std::string key = prefix + std::to_string(rank_);
  loom_status s = host_->store_set(host_->host_ctx, key.c_str(), send, len);
  if (s == LOOM_ERR_UNAVAILABLE)
    return failed(s,
                  "the job has no rendezvous store (set MASTER_ADDR and MASTER_PORT, or choose a collective "
                  "that bootstraps itself, such as mpi)");
  if (s != LOOM_OK) return failed(s, "store_set(\"" + key + "\") failed with " + loom_status_name(s));

  auto *out = static_cast<unsigned char *>(recv);
  for (int32_t r = 0; r < size_; ++r) {
    key = prefix + std::to_string(r);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    size_t got = 0;
    s = host_->store_get(host_->host_ctx, key.c_str(), out + size_t(r) * len, len, &got,
                         std::max<int64_t>(left.count(), 1));
    if (s == LOOM_ERR_TIMEOUT)
      return failed(s, "rank " + std::to_string(r) + " did not publish \"" + key + "\" within " +
                           std::to_string(timeout_ms) + " ms");
    if (s == LOOM_OK && got != len) s = LOOM_ERR_INVALID_ARGUMENT;
    if (s == LOOM_ERR_INVALID_ARGUMENT)
      return failed(s, "rank " + std::to_string(r) + " contributed " + std::to_string(got) + " bytes, this rank " +
                           std::to_string(len) + " (ranks must exchange equal sizes)");
    if (s != LOOM_OK) return failed(s, "store_get(\"" + key + "\") failed with " + loom_status_name(s));
  }
  return LOOM_OK;
}

}  // namespace loom_ddp
