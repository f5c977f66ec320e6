// SPDX-License-Identifier: Apache-2.0
// An in-process Store: a map under a mutex, with a condition variable for
// get-with-wait.
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>

#include "loom/store.hpp"

namespace loom {
namespace {

class MemoryStore final : public Store {
 public:
  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
    return Status::ok();
  }

  Status get(const std::string& key, std::vector<uint8_t>* value, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) != 0; })) {
      return Status(LOOM_ERR_TIMEOUT, "key '" + key + "' did not appear within " + std::to_string(timeout.count()) + " ms");
    }
    *value = values_[key];
    return Status::ok();
  }

  Status add(const std::string& key, int64_t delta, int64_t* result) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& bytes = values_[key];
      int64_t current = 0;
      if (!bytes.empty()) {
        std::string text(bytes.begin(), bytes.end());
        char* end = nullptr;
        errno = 0;
        current = std::strtoll(text.c_str(), &end, 10);
        if (errno != 0 || *end != '\0') {
          return Status(LOOM_ERR_INVALID_ARGUMENT, "key '" + key + "' holds a value that is not an integer");
        }
      }
      current += delta;
      std::string text = std::to_string(current);
      bytes.assign(text.begin(), text.end());
      *result = current;
    }
    changed_.notify_all();
    return Status::ok();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

}  // namespace

std::unique_ptr<Store> make_memory_store() { return std::make_unique<MemoryStore>(); }

}  // namespace loom
