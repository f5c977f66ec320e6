// SPDX-License-Identifier: Apache-2.0
// loom_swarm_rogue's flood modes: many junk connections against one donor's
// state server, all from one thread (a poll loop), for the swarm flood test.
//
//   loom_swarm_rogue [--run RUN_ID] [--idle N] [--slowloris N]
//                    [--slow-readers N] [--garbage N] HOST:PORT SECONDS
//
//   --idle N          N connections that never send a byte, held open.
//   --slowloris N     N connections that send a valid request one byte per second.
//   --slow-readers N  N clients that send a valid request (for RUN_ID) and then
//                     read the reply one byte per second (even ones) or not at
//                     all (odd ones), with a 4 KiB receive buffer so that even
//                     a small state fills the donor's send queue.
//   --garbage N       N connections sending 64 random bytes every 200 ms.
//
// A connection the donor drops (or answers and closes) is reopened: idle and
// slowloris ones after a second, the others after 100 ms. The pauses keep the
// rogue a resource attack on the server, not a connect flood at full CPU
// speed, which no rule in an application can stop (that is SYN cookies' and
// the firewall's job). At the end it prints one line per mode with counts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "records.h"
#include "state_transfer.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum Kind { kIdle, kSlowloris, kSlowReader, kGarbage, kKinds };
const char *const kKindName[kKinds] = {"idle", "slowloris", "slow-readers", "garbage"};
const milliseconds kReopen[kKinds] = {milliseconds(1000), milliseconds(1000), milliseconds(100), milliseconds(100)};

struct Conn {
  Kind kind = kIdle;
  int index = 0;  // within its kind
  int fd = -1;
  bool connecting = false;
  Clock::time_point next;  // when to reconnect (fd < 0) or act next
  size_t sent = 0;         // request bytes sent
};

struct Stats {
  uint64_t connects = 0;  // connections established
  uint64_t failed = 0;    // connects refused or timed out
  uint64_t dropped = 0;   // ended by the donor (closed, reset, or answered and closed)
  uint64_t read = 0;      // reply bytes received
  int open = 0, max_open = 0;
};

void put(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}

class Flood {
 public:
  Flood(sockaddr_in to, uint64_t run) : to_(to) {
    put(request_, loom_collab::kStateRequestMagic, 4);
    put(request_ + 4, loom_collab::kStateWireVersion, 2);
    put(request_ + 6, 0, 2);
    put(request_ + 8, run, 8);
    put(request_ + 16, 0, 8);  // min_epoch 0: whatever the donor has
    put(request_ + 24, uint32_t(crc32_z(0, request_, 24)), 4);
  }

  void add(Kind k, int n) {
    for (int i = 0; i < n; ++i) conns_.push_back({k, i, -1, false, Clock::now(), 0});
  }

  void run(Clock::time_point until) {
    std::vector<pollfd> fds;
    std::vector<Conn *> of;
    while (Clock::now() < until) {
      const auto now = Clock::now();
      auto wake = now + milliseconds(100);
      fds.clear();
      of.clear();
      for (auto &c : conns_) {
        if (c.fd < 0 && c.next <= now) open(c);
        if (c.fd >= 0 && !c.connecting && c.next <= now) act(c);
        if (c.fd < 0) {
          wake = std::min(wake, c.next);
          continue;
        }
        if (!c.connecting) wake = std::min(wake, c.next);
        // Readers that are not due to read watch only for the end (RDHUP,
        // HUP, ERR), so unread reply bytes do not spin the loop.
        short ev = c.connecting ? POLLOUT : (c.kind == kIdle || c.kind == kGarbage) ? POLLIN : 0;
        fds.push_back({c.fd, short(ev | POLLRDHUP), 0});
        of.push_back(&c);
      }
      int wait = int(std::chrono::duration_cast<milliseconds>(wake - Clock::now()).count());
      if (::poll(fds.data(), fds.size(), std::max(0, std::min(wait, 100))) <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        Conn &c = *of[i];
        if (fds[i].revents == 0 || c.fd < 0) continue;
        if (c.connecting) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0 || (fds[i].revents & (POLLERR | POLLHUP))) {
            ++stats_[c.kind].failed;
            close(c, false);
            continue;
          }
          c.connecting = false;
          ++stats_[c.kind].connects;
          Stats &s = stats_[c.kind];
          s.max_open = std::max(s.max_open, ++s.open);
          act(c);
          continue;
        }
        if (fds[i].revents & POLLIN) drain(c);
        if (c.fd >= 0 && (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) close(c, true);
      }
    }
    for (auto &c : conns_)
      if (c.fd >= 0) close(c, false);
  }

  void print() const {
    for (int k = 0; k < kKinds; ++k) {
      const Stats &s = stats_[k];
      int n = 0;
      for (const auto &c : conns_) n += c.kind == k;
      if (n == 0) continue;
      std::printf("rogue flood %s: %d connections, %llu connects, %llu failed, %llu dropped by the donor, "
                  "%llu reply bytes read, at most %d open at once\n",
                  kKindName[k], n, static_cast<unsigned long long>(s.connects),
                  static_cast<unsigned long long>(s.failed), static_cast<unsigned long long>(s.dropped),
                  static_cast<unsigned long long>(s.read), s.max_open);
    }
    std::fflush(stdout);
  }

 private:
  void open(Conn &c) {
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c.fd < 0) {
      c.next = Clock::now() + kReopen[c.kind];
      return;
    }
    if (c.kind == kSlowReader) {  // before connect: the window is agreed in the handshake
      int small = 4096;
      ::setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    c.sent = 0;
    c.connecting = true;
    c.next = Clock::now();
    if (::connect(c.fd, reinterpret_cast<const sockaddr *>(&to_), sizeof to_) != 0 && errno != EINPROGRESS) {
      ++stats_[c.kind].failed;
      close(c, false);
    }
  }

  // What a connected connection does when due.
  void act(Conn &c) {
    const auto now = Clock::now();
    switch (c.kind) {
      case kIdle:
        c.next = Clock::time_point::max();
        return;
      case kSlowloris:
        if (c.sent == sizeof request_) {  // never dropped: it got its whole request in; start again
          close(c, false);
          return;
        }
        send(c, request_ + c.sent, 1);
        c.next = now + milliseconds(1000);
        return;
      case kSlowReader:
        if (c.sent < sizeof request_) {
          send(c, request_ + c.sent, sizeof request_ - c.sent);
          c.next = now + milliseconds(1000);
          return;
        }
        if (c.index % 2 == 0) read_some(c, 1);
        c.next = now + milliseconds(1000);
        return;
      case kGarbage: {
        uint8_t junk[64];
        for (auto &b : junk) b = uint8_t(rng_());
        send(c, junk, sizeof junk);
        c.next = now + milliseconds(200);
        return;
      }
      case kKinds:
        return;
    }
  }

  void send(Conn &c, const uint8_t *p, size_t n) {
    ssize_t w = ::send(c.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) c.sent += size_t(w);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) close(c, true);
  }

  void read_some(Conn &c, size_t n) {
    uint8_t buf[4096];
    ssize_t r = ::recv(c.fd, buf, std::min(n, sizeof buf), MSG_DONTWAIT);
    if (r > 0) stats_[c.kind].read += uint64_t(r);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) close(c, true);
  }

  void drain(Conn &c) {  // idle and garbage connections: whatever the donor says, then its close
    read_some(c, 4096);
  }

  void close(Conn &c, bool by_donor) {
    if (c.fd < 0) return;
    if (!c.connecting) --stats_[c.kind].open;
    ::close(c.fd);
    c.fd = -1;
    c.connecting = false;
    if (by_donor) ++stats_[c.kind].dropped;
    c.next = Clock::now() + kReopen[c.kind];
  }

  sockaddr_in to_;
  uint8_t request_[loom_collab::kStateRequestSize];
  std::vector<Conn> conns_;
  Stats stats_[kKinds];
  std::minstd_rand rng_{12345};
};

int usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--run RUN_ID] [--idle N] [--slowloris N] [--slow-readers N] [--garbage N] "
               "HOST:PORT SECONDS\n",
               argv0);
  return 2;
}

}  // namespace

// Called by main for any argument list that starts with a flood flag.
int flood_main(int argc, char **argv) {
  std::string run_id;
  int count[kKinds] = {0, 0, 0, 0};
  int i = 1;
  for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--run") {
      run_id = argv[i + 1];
      continue;
    }
    int k = 0;
    while (k < kKinds && flag != std::string("--") + kKindName[k]) ++k;
    if (k == kKinds) return usage(argv[0]);
    count[k] = std::atoi(argv[i + 1]);
    if (count[k] < 0 || count[k] > 4096) return usage(argv[0]);
  }
  if (argc - i != 2) return usage(argv[0]);
  if (count[kSlowReader] > 0 && run_id.empty()) {
    std::fprintf(stderr, "rogue: --slow-readers needs --run RUN_ID (their requests must be valid)\n");
    return 2;
  }
  const std::string target = argv[i];
  const int seconds = std::atoi(argv[i + 1]);
  const size_t colon = target.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  if (colon == std::string::npos || ::inet_pton(AF_INET, target.substr(0, colon).c_str(), &to.sin_addr) != 1 ||
      seconds <= 0)
    return usage(argv[0]);
  to.sin_port = htons(uint16_t(std::atoi(target.c_str() + colon + 1)));
  Flood flood(to, run_id.empty() ? 0 : loom_collab::run_hash(run_id));
  for (int k = 0; k < kKinds; ++k) flood.add(Kind(k), count[k]);
  std::printf("rogue flood on %s for %d s\n", target.c_str(), seconds);
  std::fflush(stdout);
  flood.run(Clock::now() + std::chrono::seconds(seconds));
  flood.print();
  return 0;
}
