// SPDX-License-Identifier: Apache-2.0
// The job's Store over LibTorch's c10d::TCPStore. This is the only core file
// that includes LibTorch headers (they cost ~25 s of compile time each).
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "loom/job.hpp"
#include "loom/store.hpp"

namespace loom {
namespace {

class TcpStore final : public Store {
 public:
  explicit TcpStore(c10::intrusive_ptr<c10d::TCPStore> store) : store_(std::move(store)) {}

  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    return guarded([&] { store_->set(key, value); });
  }

  Status get(const std::string& key, std::vector<uint8_t>* value, std::chrono::milliseconds timeout) override {
    // TCPStore::wait with a short timeout leaves that timeout on the shared
    // connection (LibTorch 1.13), breaking later calls: poll check() instead.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(100);
    for (;;) {
      bool present = false;
      Status s = guarded([&] { present = store_->check({key}); });
      if (!s.is_ok()) return s;
      if (present) return guarded([&] { *value = store_->get(key); });
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status(LOOM_ERR_TIMEOUT, "key '" + key + "' did not appear within " + std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  }

  Status add(const std::string& key, int64_t delta, int64_t* result) override {
    return guarded([&] { *result = store_->add(key, delta); });
  }

 private:
  template <typename F>
  Status guarded(F&& body) {
    try {
      body();
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(LOOM_ERR_SYSTEM, std::string("TCPStore: ") + e.what());
    }
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                                      std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = is_server;
  options.numWorkers = static_cast<std::size_t>(world_size);
  options.waitWorkers = false;
  options.timeout = timeout;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // Since 2.4 the store asks for its libuv backend by default, and a LibTorch
  // built without libuv (Debian's) then refuses to make any store, client or
  // server. The classic backend is in every build and is the one 1.13 has.
  options.useLibUV = false;
#endif
  try {
    return std::make_unique<TcpStore>(c10::make_intrusive<c10d::TCPStore>(host, options));
  } catch (const std::exception& e) {
    throw Error::runtime("cannot " + std::string(is_server ? "serve" : "reach") + " the rendezvous store at " + host + ":" +
                         std::to_string(port) + " (MASTER_ADDR:MASTER_PORT): " + e.what());
  }
}

std::unique_ptr<Store> make_job_store(const JobInfo& job, std::chrono::milliseconds timeout) {
  if (!job.master_addr.empty()) {
    // LOOM_STORE_HOSTED=1 (set by `loom launch`, which serves the store
    // itself, bound to MASTER_ADDR only): rank 0 is a client like the rest.
    const char* hosted = std::getenv("LOOM_STORE_HOSTED");
    const bool serve = job.rank == 0 && !(hosted != nullptr && std::strcmp(hosted, "1") == 0);
    return make_tcp_store(job.master_addr, job.master_port, serve, job.world_size, timeout);
  }
  if (job.world_size == 1) return make_memory_store();
  return nullptr;
}

}  // namespace loom
