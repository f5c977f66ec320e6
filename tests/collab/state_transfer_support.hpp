// SPDX-License-Identifier: Apache-2.0
// Fakes and wire helpers shared by the state-transfer tests: fake donors
// and requests written from the wire format in state_transfer.h,
// independently of the implementation, so they also check that the format is
// what the header says. Test-only; everything is internal to each test file.
#pragma once

#include "state_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace loom_collab {
namespace transfer_test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
inline constexpr uint64_t kRun = 0x1234abcd5678ef01ull;
inline constexpr size_t MiB = size_t(1) << 20;

// A swarm key of one repeated byte: tests tell keys apart by it.
inline loom_key::SwarmKey key_of(uint8_t fill) {
  loom_key::SwarmKey k;
  k.fill(fill);
  return k;
}

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Collects log lines from any thread.
class LogSink {
 public:
  LogFn fn() {
    return [this](Level l, const std::string &m) {
      std::lock_guard<std::mutex> g(m_);
      lines_.emplace_back(l, m);
    };
  }
  // True when a line at `level` contains every one of `parts`.
  bool has(Level level, std::initializer_list<const char *> parts) {
    std::lock_guard<std::mutex> g(m_);
    for (auto &[l, m] : lines_) {
      if (l != level) continue;
      bool all = true;
      for (auto *p : parts) all = all && m.find(p) != std::string::npos;
      if (all) return true;
    }
    return false;
  }
  // Lines at any level that contain every one of `parts`.
  size_t count(std::initializer_list<const char *> parts) {
    std::lock_guard<std::mutex> g(m_);
    size_t n = 0;
    for (auto &[l, m] : lines_) {
      bool all = true;
      for (auto *p : parts) all = all && m.find(p) != std::string::npos;
      n += all;
    }
    return n;
  }
  std::string text() {
    std::lock_guard<std::mutex> g(m_);
    std::string s;
    for (auto &[l, m] : lines_) s += "[" + std::to_string(int(l)) + "] " + m + "\n";
    return s;
  }

 private:
  std::mutex m_;
  std::vector<std::pair<Level, std::string>> lines_;
};

// Deterministic, non-repeating bytes (a repeated pattern could hide an
// offset error).
inline Bytes pattern(size_t n, uint64_t seed) {
  Bytes b(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&b[i], &x, 8);
  }
  for (; i < n; ++i) b[i] = uint8_t(i * 31 + seed);
  return b;
}

// A port that refuses connections: bound but not listening. Holding it
// (rather than binding and closing) keeps the kernel from giving the port to
// anyone else, including as the source port of our own connect(), which on
// loopback would connect the client to itself.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
    socklen_t l = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &l);
    port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A TCP socket listening on 127.0.0.1 at a port of the kernel's choice (*port).
inline int listen_on_loopback(uint16_t *port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd, 16), 0);
  socklen_t l = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l);
  *port = ntohs(a.sin_port);
  return fd;
}

inline int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  timeval tv{5, 0};  // every blocking call in the test has a bound too
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_bytes(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}
inline bool send_bytes(int fd, const Bytes &b) { return send_bytes(fd, b.data(), b.size()); }

inline bool recv_bytes(int fd, uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

// ---- the wire format, written from the header's description ----
inline void le(Bytes &b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline uint32_t crc_of(const uint8_t *p, size_t n) { return uint32_t(crc32_z(0, p, n)); }

inline Bytes request_bytes(uint64_t run, int64_t min_epoch, uint16_t flags = 0) {
  Bytes b;
  le(b, kStateRequestMagic, 4);
  le(b, kStateWireVersion, 2);
  le(b, flags, 2);
  le(b, run, 8);
  le(b, uint64_t(min_epoch), 8);
  le(b, crc_of(b.data(), b.size()), 4);
  return b;
}

// Sends req to a server on loopback and returns the status of its plain
// 36-byte reply, or -1 when none came.
inline int status_of_reply(uint16_t port, const Bytes &req) {
  const int fd = connect_to(port);
  if (fd < 0) return -1;
  uint8_t reply[kStateReplySize];
  const bool got = send_bytes(fd, req) && recv_bytes(fd, reply, sizeof reply);
  ::close(fd);
  return got ? reply[6] | (reply[7] << 8) : -1;
}

struct Reply {
  uint16_t status = 0;
  int64_t epoch = 1;
  uint64_t total = 0;  // defaults to payload.size()
  uint32_t chunk = 1 << 16;
  bool bad_total_crc = false;
  int bad_chunk_crc = -1;  // index of a chunk whose CRC is sent wrong
};

inline Bytes reply_header(const Reply &r, const Bytes &payload) {
  Bytes b;
  le(b, kStateReplyMagic, 4);
  le(b, kStateWireVersion, 2);
  le(b, r.status, 2);
  le(b, uint64_t(r.epoch), 8);
  le(b, r.total ? r.total : payload.size(), 8);
  le(b, r.chunk, 4);
  le(b, crc_of(payload.data(), payload.size()) ^ (r.bad_total_crc ? 1u : 0u), 4);
  le(b, crc_of(b.data(), b.size()), 4);
  return b;
}

inline Bytes reply_bytes(const Reply &r, const Bytes &payload) {
  Bytes b = reply_header(r, payload);
  int index = 0;
  for (size_t off = 0; off < payload.size(); off += r.chunk, ++index) {
    size_t n = std::min<size_t>(r.chunk, payload.size() - off);
    le(b, n, 4);
    le(b, crc_of(payload.data() + off, n) ^ (index == r.bad_chunk_crc ? 1u : 0u), 4);
    b.insert(b.end(), payload.begin() + long(off), payload.begin() + long(off + n));
  }
  return b;
}

// A donor written in the test: accepts connections one at a time, reads the
// 28-byte request and lets `behave` answer (it may hold the connection until
// stop_fd is readable). Stops promptly in its destructor.
class FakeDonor {
 public:
  using Behave = std::function<void(int fd, int stop_fd)>;
  explicit FakeDonor(Behave behave) : behave_(std::move(behave)) {
    listen_ = listen_on_loopback(&port_);
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    stop_r_ = p[0];
    stop_w_ = p[1];
    thread_ = std::thread([this] { run(); });
  }
  ~FakeDonor() {
    (void)!::write(stop_w_, "x", 1);
    thread_.join();
    ::close(listen_);
    ::close(stop_r_);
    ::close(stop_w_);
  }
  uint16_t port() const { return port_; }
  int served() const { return served_; }

 private:
  void run() {
    for (;;) {
      pollfd p[2] = {{listen_, POLLIN, 0}, {stop_r_, POLLIN, 0}};
      if (::poll(p, 2, 100) < 0) return;
      if (p[1].revents) return;
      if (!(p[0].revents & POLLIN)) continue;
      int fd = ::accept(listen_, nullptr, nullptr);
      if (fd < 0) continue;
      timeval tv{2, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      uint8_t req[kStateRequestSize];
      if (recv_bytes(fd, req, sizeof req)) {
        ++served_;
        behave_(fd, stop_r_);
      }
      ::close(fd);
    }
  }
  Behave behave_;
  int listen_ = -1, stop_r_ = -1, stop_w_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> served_{0};
  std::thread thread_;
};

// Sends fixed bytes, then closes.
inline FakeDonor::Behave sends(Bytes b) {
  return [b](int fd, int) { send_bytes(fd, b); };
}
// Holds the connection open, silent, until the donor stops.
inline FakeDonor::Behave silent() {
  return [](int, int stop_fd) {
    pollfd p{stop_fd, POLLIN, 0};
    ::poll(&p, 1, 30000);
  };
}

inline Donor donor(uint64_t id, uint16_t port, int64_t epoch = 0) {
  Donor d;
  d.peer_id = id;
  d.host = "127.0.0.1";
  d.port = port;
  d.epoch = epoch;
  return d;
}

}  // namespace transfer_test
}  // namespace loom_collab
