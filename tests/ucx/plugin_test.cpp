// SPDX-License-Identifier: Apache-2.0
// plugin_test.cpp: the ucx plugin in one process: refusing a communicator
// without an out-of-band exchange, a one-member communicator, and many
// communicators alive at once between two plugin instances driven by two
// threads (ranks as threads; the out-of-band exchange is in memory).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/collective.hpp"
#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"

namespace ucx_test {
namespace {

std::unique_ptr<loom::Host> make_host(int rank, int size) {
  loom::HostConfig config;
  config.search_path = loom::plugin_search_path({}, {});
  loom::JobInfo job;  // no MASTER_ADDR: no store, so no default exchange
  job.rank = rank;
  job.world_size = size;
  job.launcher = "none";
  return std::make_unique<loom::Host>(std::move(config), job);
}

// An allgather among threads of this process, one instance per key.
class MemoryExchange {
 public:
  explicit MemoryExchange(int size) : size_(size) {}
  std::function<loom::Status(const void*, size_t, void*, int64_t)> member(const std::string& key, int rank) {
    return [this, key, rank](const void* send, size_t len, void* recv, int64_t timeout_ms) -> loom::Status {
      std::unique_lock<std::mutex> lock(mu_);
      Round& r = rounds_[key];
      r.data.resize(size_t(size_) * len);
      std::memcpy(r.data.data() + size_t(rank) * len, send, len);
      if (++r.arrived == size_) cv_.notify_all();
      if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return r.arrived == size_; }))
        return loom::Status(LOOM_ERR_TIMEOUT, "memory exchange timed out");
      std::memcpy(recv, r.data.data(), r.data.size());
      return loom::Status::ok();
    };
  }

 private:
  struct Round {
    int arrived = 0;
    std::vector<uint8_t> data;
  };
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Round> rounds_;
};

TEST(Plugin, RefusesCommunicatorWithoutOutOfBandExchange) {
  auto host = make_host(0, 2);
  auto ucx = host->open_collective("ucx");
  loom::CommOptions o;
  o.rank = 0;
  o.size = 2;
  std::unique_ptr<loom::Communicator> comm;
  const loom::Status s = ucx->create_comm(o, &comm);
  EXPECT_EQ(s.code(), LOOM_ERR_INVALID_ARGUMENT) << s.to_string();
  EXPECT_NE(s.message().find("out-of-band"), std::string::npos) << s.message();
  EXPECT_FALSE(comm);
}

TEST(Plugin, OneMemberCommunicatorCopiesLocally) {
  auto host = make_host(0, 1);
  auto ucx = host->open_collective("ucx");
  EXPECT_TRUE(ucx->has_capability(LOOM_CAP_HOST_MEMORY | LOOM_CAP_DYNAMIC_GROUPS | LOOM_CAP_ABORT |
                                  LOOM_CAP_PEER_FAILURE));
  EXPECT_FALSE(ucx->has_capability(LOOM_CAP_ASYNC_PROGRESS));
  loom::CommOptions o;
  std::unique_ptr<loom::Communicator> comm;
  ASSERT_TRUE(ucx->create_comm(o, &comm).is_ok());
  std::vector<float> a = {1, 2, 3}, b(3);
  EXPECT_TRUE(comm->allreduce(a.data(), b.data(), 3, LOOM_DTYPE_F32, LOOM_REDUCE_AVG).is_ok());
  EXPECT_EQ(b, a);
  EXPECT_TRUE(comm->barrier().is_ok());
}

// Two instances (one per thread, as two ranks would have), 40 communicators
// between them alive at once, each running a non-blocking allreduce while
// all the others are posted too, then all destroyed.
TEST(Plugin, ManyCommunicatorsAtOnce) {
  constexpr int kComms = 40;
  MemoryExchange exchange(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    auto host = make_host(rank, 2);
    auto ucx = host->open_collective("ucx");
    std::vector<std::unique_ptr<loom::Communicator>> comms(kComms);
    for (int c = 0; c < kComms; ++c) {
      loom::CommOptions o;
      o.rank = rank;
      o.size = 2;
      o.timeout = std::chrono::seconds(20);
      o.name = "many-" + std::to_string(c);
      o.oob = exchange.member(o.name, rank);
      const loom::Status s = ucx->create_comm(o, &comms[size_t(c)]);
      if (!s.is_ok()) {
        errors[size_t(rank)] = "create " + o.name + ": " + s.to_string();
        return;
      }
    }
    std::vector<std::vector<int32_t>> in(kComms), out(kComms);
    std::vector<loom::Request> requests(kComms);
    for (int c = 0; c < kComms; ++c) {
      const size_t count = size_t(1) << (c % 16);  // latency and bandwidth algorithms
      in[size_t(c)].assign(count, c + rank);
      out[size_t(c)].assign(count, -1);
      const loom::Status s = comms[size_t(c)]->iallreduce(in[size_t(c)].data(), out[size_t(c)].data(), count,
                                                          LOOM_DTYPE_I32, LOOM_REDUCE_SUM, &requests[size_t(c)]);
      if (!s.is_ok()) errors[size_t(rank)] = "post: " + s.to_string();
    }
    for (int c = kComms - 1; c >= 0; --c) {  // reverse order: waits progress the others
      const loom::Status s = requests[size_t(c)].wait();
      if (!s.is_ok()) errors[size_t(rank)] = "wait: " + s.to_string();
      requests[size_t(c)].reset();
      for (int32_t v : out[size_t(c)])
        if (v != 2 * c + 1) errors[size_t(rank)] = "wrong result on communicator " + std::to_string(c);
    }
    comms.clear();
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace ucx_test
