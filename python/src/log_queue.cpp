// SPDX-License-Identifier: Apache-2.0
#include "log_queue.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <mutex>

namespace loom::python {
namespace {

// At most this many messages wait; older ones are dropped (counted), so a
// loop that never drains cannot grow without bound.
constexpr size_t kMaxQueued = 10000;

int python_level(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return 10;  // logging.DEBUG
    case spdlog::level::info: return 20;
    case spdlog::level::warn: return 30;
    case spdlog::level::err: return 40;
    default: return 50;
  }
}

class QueueSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::pair<int, std::string>> drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<int, std::string>> out(queue_.begin(), queue_.end());
    queue_.clear();
    if (dropped_ > 0) {
      out.insert(out.begin(), {30, std::to_string(dropped_) + " earlier Loom log messages were dropped (not drained)"});
      dropped_ = 0;
    }
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (queue_.size() >= kMaxQueued) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.emplace_back(python_level(msg.level), std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  std::deque<std::pair<int, std::string>> queue_;
  size_t dropped_ = 0;
};

std::shared_ptr<QueueSink>& sink() {
  static auto* held = new std::shared_ptr<QueueSink>();  // never destroyed: plugins may log at exit
  return *held;
}

}  // namespace

void capture_logs() {
  if (sink()) return;
  sink() = std::make_shared<QueueSink>();
  auto logger = std::make_shared<spdlog::logger>("loom", sink());
  logger->set_level(spdlog::level::debug);
  spdlog::set_default_logger(logger);
}

std::vector<std::pair<int, std::string>> drain_logs() {
  if (!sink()) return {};
  return sink()->drain();
}

}  // namespace loom::python
