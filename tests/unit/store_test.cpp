// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "loom/launch.hpp"
#include "loom/store.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// A port below the ephemeral range that was free a moment ago: outgoing
// connections of parallel tests cannot take it in between.
int free_port() { return loom::pick_free_port(); }

TEST(MemoryStore, GetWaitsForALaterSet) {
  auto store = make_memory_store();
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    store->set("k", bytes("v"));
  });
  std::vector<uint8_t> value;
  EXPECT_TRUE(store->get("k", &value, 5s).is_ok());
  EXPECT_EQ(value, bytes("v"));
  writer.join();
}

TEST(MemoryStore, GetTimesOut) {
  auto store = make_memory_store();
  std::vector<uint8_t> value;
  auto t0 = std::chrono::steady_clock::now();
  Status s = store->get("missing", &value, 100ms);
  EXPECT_EQ(s.code(), LOOM_ERR_TIMEOUT);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(MemoryStore, AddIsAtomicAcrossThreads) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      int64_t r;
      for (int i = 0; i < 250; ++i) store->add("n", 1, &r);
    });
  }
  for (auto& t : threads) t.join();
  int64_t result = 0;
  store->add("n", 0, &result);
  EXPECT_EQ(result, 1000);
}

TEST(TcpStore, TwoProcessesExchangeKeysAndCount) {
  const int port = free_port();
  pid_t child = fork();
  if (child == 0) {
    // Rank 1 in its own process: a client of rank 0's server.
    int code = 1;
    try {
      auto store = make_tcp_store("127.0.0.1", port, false, 2, 10s);
      std::vector<uint8_t> value;
      int64_t n = 0;
      if (store->set("from1", bytes("hello")).is_ok() && store->get("from0", &value, 10s).is_ok() &&
          value == bytes("world") && store->add("count", 1, &n).is_ok()) {
        code = 0;
      }
    } catch (...) {
    }
    _exit(code);
  }
  auto store = make_tcp_store("127.0.0.1", port, true, 2, 10s);
  ASSERT_TRUE(store->set("from0", bytes("world")).is_ok());
  std::vector<uint8_t> value;
  ASSERT_TRUE(store->get("from1", &value, 10s).is_ok());
  EXPECT_EQ(value, bytes("hello"));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  int64_t n = 0;
  ASSERT_TRUE(store->add("count", 1, &n).is_ok());
  EXPECT_EQ(n, 2);
  EXPECT_EQ(store->get("never", &value, 200ms).code(), LOOM_ERR_TIMEOUT);
}

TEST(TcpStore, UnreachableServerIsARuntimeErrorNamingTheAddress) {
  const int port = free_port();
  try {
    make_tcp_store("127.0.0.1", port, false, 2, 300ms);
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
