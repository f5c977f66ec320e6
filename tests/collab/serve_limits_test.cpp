// SPDX-License-Identifier: Apache-2.0
// The state server's limits (ServeLimits): idle and slowloris connections,
// stalled readers and request rates cannot keep an honest joiner out, and
// rejections are logged at most once a minute per address. Clients here are
// raw sockets written from the wire format in state_transfer.h.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "serve_guard.h"
#include "state_transfer.h"

namespace loom_collab {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr uint64_t kRun = 0x5eed5eed5eed5eedull;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Lines {
 public:
  LogFn fn() {
    return [this](Level, const std::string &m) {
      std::lock_guard<std::mutex> g(m_);
      lines_.push_back(m);
    };
  }
  int count(const char *part) {
    std::lock_guard<std::mutex> g(m_);
    int n = 0;
    for (const auto &l : lines_) n += l.find(part) != std::string::npos;
    return n;
  }
  std::string text() {
    std::lock_guard<std::mutex> g(m_);
    std::string s;
    for (const auto &l : lines_) s += l + "\n";
    return s;
  }

 private:
  std::mutex m_;
  std::vector<std::string> lines_;
};

// A connected client socket with 5 s bounds on every call; rcvbuf > 0 shrinks
// its receive buffer first, so that a client that does not read stalls the
// server after a few KiB.
int connect_to(uint16_t port, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<uint8_t> request(uint64_t run, int64_t min_epoch) {
  std::vector<uint8_t> b(kStateRequestSize);
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b[at + i] = uint8_t(v >> (8 * i));
  };
  put(0, kStateRequestMagic, 4);
  put(4, kStateWireVersion, 2);
  put(6, 0, 2);
  put(8, run, 8);
  put(16, uint64_t(min_epoch), 8);
  put(24, uint32_t(crc32_z(0, b.data(), 24)), 4);
  return b;
}

// A client that asks and then reads nothing (its fd; -1 on failure).
int stalled_client(uint16_t port) {
  int fd = connect_to(port, 4096);
  auto r = request(kRun, 0);
  if (fd >= 0 && ::send(fd, r.data(), r.size(), MSG_NOSIGNAL) != ssize_t(r.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::optional<DownloadedState> fetch(uint16_t port, std::string *why, const LogFn &log = nullptr) {
  Donor d;
  d.peer_id = 1;
  d.host = "127.0.0.1";
  d.port = port;
  return download_state({d}, kRun, 0, milliseconds(5000), milliseconds(3000), log, why);
}

bool wait_for(const std::function<bool()> &pred, double seconds) {
  auto t0 = Clock::now();
  while (!pred()) {
    if (seconds_since(t0) > seconds) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

TEST(ServeLimits, IdleFloodFromOneAddressCannotLockOutAJoiner) {
  Lines log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  server.publish(1, Bytes(100000, 7));
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(connect_to(server.port()));  // connected, never ask
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LE(server.pending(), ServeLimits().max_pending_per_address);
  std::string why;
  auto t0 = Clock::now();
  auto got = fetch(server.port(), &why);
  EXPECT_TRUE(got) << why;
  EXPECT_LT(seconds_since(t0), 1.0);
  for (int fd : idle) ::close(fd);
  // One line for the first dropped connection; the rest are counted for the minute's report.
  EXPECT_EQ(log.count("to make room for a newer connection"), 1) << log.text();
}

TEST(ServeLimits, SlowlorisIsDroppedAtTheIdleTimeout) {
  Lines log;
  ServeLimits limits;
  limits.idle_timeout = milliseconds(400);
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  auto r = request(kRun, 0);
  auto t0 = Clock::now();
  uint8_t c = 0;
  ssize_t got = 1;
  for (size_t i = 0; i < r.size() && got != 0; ++i) {  // one byte every 100 ms
    ::send(fd, &r[i], 1, MSG_NOSIGNAL);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) got = ::recv(fd, &c, 1, 0);
  }
  const double dropped_after = seconds_since(t0);
  ::close(fd);
  EXPECT_EQ(got, 0) << "never dropped";
  EXPECT_GE(dropped_after, 0.35);
  EXPECT_LT(dropped_after, 1.2);
  EXPECT_EQ(log.count("request bytes in 400 ms"), 1) << log.text();
}

TEST(ServeLimits, StalledReaderIsResetAfterTheIdleTimeout) {
  Lines log;
  ServeLimits limits;
  limits.idle_timeout = milliseconds(500);
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  server.publish(1, Bytes(16 << 20, 3));
  int fd = stalled_client(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(wait_for([&] { return server.active() == 1; }, 2));
  auto t0 = Clock::now();
  ASSERT_TRUE(wait_for([&] { return server.active() == 0; }, 3)) << log.text();
  EXPECT_LT(seconds_since(t0), 1.5);
  // Reset, not closed: the client's next read fails at once instead of after the unsent megabytes.
  ASSERT_TRUE(wait_for([&] { return log.count("it read nothing for 500 ms") == 1; }, 1)) << log.text();
  uint8_t buf[65536];
  ssize_t r = 1;
  while (r > 0) r = ::recv(fd, buf, sizeof buf, 0);
  EXPECT_EQ(r, -1);
  EXPECT_EQ(errno, ECONNRESET);
  ::close(fd);
}

TEST(ServeLimits, StalledTransfersMakeRoomForANewRequest) {
  Lines log;
  ServeLimits limits;
  limits.max_transfers = 2;
  limits.idle_timeout = milliseconds(30000);  // so that only preemption frees a slot
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  server.publish(1, Bytes(16 << 20, 5));
  int a = stalled_client(server.port()), b = stalled_client(server.port());
  ASSERT_TRUE(wait_for([&] { return server.active() == 2; }, 2));
  std::this_thread::sleep_for(milliseconds(1200));  // stalled for longer than the grace
  std::string why;
  auto got = fetch(server.port(), &why);
  ASSERT_TRUE(got) << why << "\n" << log.text();
  EXPECT_EQ(got->bytes.size(), size_t(16 << 20));
  EXPECT_EQ(log.count("was ended for"), 1) << log.text();
  ::close(a);
  ::close(b);
}

TEST(ServeLimits, BusyWhileTheOnlySlotIsYoungThenPreemptible) {
  Lines log;
  ServeLimits limits;
  limits.max_transfers = 1;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  server.set_wait_for_publish(milliseconds(4000));
  server.publish(1, Bytes(1000, 1));
  int waiting = connect_to(server.port());  // asks for an epoch nobody publishes
  auto r = request(kRun, 50);
  ASSERT_EQ(::send(waiting, r.data(), r.size(), MSG_NOSIGNAL), ssize_t(r.size()));
  ASSERT_TRUE(wait_for([&] { return server.wanted(); }, 2));
  std::string why;
  EXPECT_FALSE(fetch(server.port(), &why));
  EXPECT_NE(why.find("busy"), std::string::npos) << why;
  std::this_thread::sleep_for(milliseconds(1100));  // now it has waited past the grace
  auto got = fetch(server.port(), &why);
  EXPECT_TRUE(got) << why << "\n" << log.text();
  ::close(waiting);
}

TEST(ServeLimits, RequestRatePerAddress) {
  Lines log;
  ServeLimits limits;
  limits.requests_per_minute = 3;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  server.publish(1, Bytes(1000, 1));
  std::string why;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fetch(server.port(), &why)) << i << ": " << why;
  EXPECT_FALSE(fetch(server.port(), &why));
  EXPECT_NE(why.find("busy"), std::string::npos) << why;
  EXPECT_EQ(log.count("serve_requests_per_minute"), 1) << log.text();
}

TEST(ServeLimits, DroppedRequestsGiveTheirTokenBack) {
  Lines log;
  ServeLimits limits;
  limits.requests_per_minute = 2;
  limits.idle_timeout = milliseconds(300);
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  server.publish(1, Bytes(64 << 20, 9));
  for (int i = 0; i < 4; ++i) {  // each gets what the sockets' buffers hold (a few MiB of 64), stalls and is dropped
    int fd = stalled_client(server.port());
    ASSERT_TRUE(wait_for([&] { return server.active() == 1; }, 2)) << i;
    ASSERT_TRUE(wait_for([&] { return server.active() == 0; }, 2)) << i;
    std::this_thread::sleep_for(milliseconds(100));  // the front thread gives the token back when it joins the transfer
    ::close(fd);
  }
  std::this_thread::sleep_for(milliseconds(100));
  std::string why;  // without the tokens given back, the third stalled client would already have been refused
  EXPECT_TRUE(fetch(server.port(), &why)) << why << "\n" << log.text();
}

TEST(ServeGuard, RejectionsAreLoggedOncePerAddressPerMinute) {
  Lines log;
  ServeGuard guard(60, log.fn());
  const auto t0 = Clock::now();
  for (int i = 0; i < 100; ++i) guard.reject("192.0.2.1", Rejection::idle, "first idle", t0 + milliseconds(500 * i));
  guard.reject("192.0.2.2", Rejection::garbage, "other address", t0);
  guard.flush(t0 + std::chrono::seconds(59));
  EXPECT_EQ(log.count("first idle"), 1);
  EXPECT_EQ(log.count("other address"), 1);
  EXPECT_EQ(log.count("more connections"), 0) << log.text();
  guard.flush(t0 + std::chrono::seconds(60));
  EXPECT_EQ(log.count("turned away 99 more connections from 192.0.2.1 in the last 60 s (99 idle)"), 1) << log.text();
  guard.flush(t0 + std::chrono::seconds(200));  // a quiet minute: forgotten, the next one is logged at once
  EXPECT_EQ(guard.tracked(), 0u);
  guard.reject("192.0.2.1", Rejection::stalled, "again", t0 + std::chrono::seconds(201));
  EXPECT_EQ(log.count("again"), 1);
}

TEST(ServeGuard, TablesStayBoundedUnderManyAddresses) {
  ServeGuard guard(1, nullptr);
  const auto t0 = Clock::now();
  for (int i = 0; i < 3 * int(ServeGuard::kMaxAddresses); ++i) {
    const std::string addr = "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256);
    guard.take(addr, t0);
    guard.reject(addr, Rejection::garbage, "x", t0);
  }
  EXPECT_LE(guard.tracked(), 2 * (ServeGuard::kMaxAddresses + 1));
}

TEST(ServeGuard, TokensRefillAtTheRate) {
  ServeGuard guard(2, nullptr);
  const auto t0 = Clock::now();
  EXPECT_TRUE(guard.take("a", t0));
  EXPECT_TRUE(guard.take("a", t0));
  EXPECT_FALSE(guard.take("a", t0));
  EXPECT_TRUE(guard.take("b", t0));  // per address
  EXPECT_TRUE(guard.take("a", t0 + std::chrono::seconds(30)));
  EXPECT_FALSE(guard.take("a", t0 + std::chrono::seconds(31)));
  guard.give_back("a", 0.25, t0 + std::chrono::seconds(31));  // sent a quarter: three quarters back
  EXPECT_FALSE(guard.take("a", t0 + std::chrono::seconds(31)));
  EXPECT_TRUE(guard.take("a", t0 + std::chrono::seconds(39)));  // 0.75 + 8 s of 2/min
}

TEST(ServeGuard, AddressKeyIsTheIPv4AddressOrTheIPv6Slash64) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  ::inet_pton(AF_INET, "198.51.100.7", &v4.sin_addr);
  v4.sin_port = htons(999);
  EXPECT_EQ(address_key(reinterpret_cast<sockaddr *>(&v4)), "198.51.100.7");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  ::inet_pton(AF_INET6, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", &v6.sin6_addr);
  EXPECT_EQ(address_key(reinterpret_cast<sockaddr *>(&v6)), "2001:db8:1:2::/64");
  ::inet_pton(AF_INET6, "::ffff:192.0.2.9", &v6.sin6_addr);
  EXPECT_EQ(address_key(reinterpret_cast<sockaddr *>(&v6)), "192.0.2.9");
}

}  // namespace
}  // namespace loom_collab
