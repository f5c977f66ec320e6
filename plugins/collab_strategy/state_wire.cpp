// SPDX-License-Identifier: Apache-2.0
// The state transfer's shared internals (state_wire.h): encoding, address
// lookup and bounded socket I/O.
#include "state_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <poll.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "../common/listen_address.h"

namespace loom_collab {

const char *to_string(StateStatus s) {
  switch (s) {
    case StateStatus::ok:
      return "ok";
    case StateStatus::not_ready:
      return "not ready (nothing published in time)";
    case StateStatus::other_run:
      return "donor belongs to another run";
    case StateStatus::behind:
      return "donor is behind";
    case StateStatus::busy:
      return "donor is busy";
    case StateStatus::bad_request:
      return "donor refused the request";
    case StateStatus::not_key_holder:
      return "donor refused: this peer did not prove it holds the swarm's key (swarm_key: none, or another)";
  }
  return "unknown status";
}

namespace wire {

uint32_t crc(const uint8_t *p, size_t n) { return uint32_t(crc32_z(0, p, n)); }

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

std::string errno_text(int e) { return std::strerror(e); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
void set_int_opt(int fd, int level, int opt, int v) { ::setsockopt(fd, level, opt, &v, sizeof v); }

// Numeric at once; a name on a helper thread we stop waiting for
// (plugins/common/listen_address.h).
bool resolve(const std::string &host, uint16_t port, bool passive, milliseconds timeout, sockaddr_storage *out,
             socklen_t *out_len, std::string *why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = std::to_string(port);
  const int rc = loom_net::lookup_address(host.empty() ? nullptr : host.c_str(), service.c_str(), hints,
                                          hints.ai_flags, timeout, out, out_len);
  if (rc == loom_net::kLookupTimedOut) {
    *why = "cannot resolve " + host + ": no answer within " + std::to_string(timeout.count()) + " ms";
    return false;
  }
  if (rc != 0) {
    *why = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return false;
  }
  return true;
}

std::string address_text(const sockaddr *sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    auto *a = reinterpret_cast<const sockaddr_in *>(sa);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    auto *a = reinterpret_cast<const sockaddr_in6 *>(sa);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}
bool connect_to(const std::string &host, uint16_t port, const IoLimits &lim, Fd *out, std::string *why,
                const std::string &bind_host) {
  const auto left = std::chrono::duration_cast<milliseconds>(lim.deadline - Clock::now());
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (!resolve(host, port, false, std::max(milliseconds(1), std::min(left, lim.stall)), &addr, &len, why)) return false;
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    *why = "socket: " + errno_text(errno);
    return false;
  }
  set_int_opt(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
  if (!bind_host.empty()) {
    sockaddr_storage local{};
    socklen_t local_len = 0;
    if (!resolve(bind_host, 0, true, std::max(milliseconds(1), std::min(left, lim.stall)), &local, &local_len, why))
      return false;
    if (::bind(fd.get(), reinterpret_cast<sockaddr *>(&local), local_len) != 0) {
      *why = "cannot bind " + bind_host + ": " + errno_text(errno);
      return false;
    }
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr *>(&addr), len) != 0) {
    if (errno != EINPROGRESS) {
      *why = "cannot connect: " + errno_text(errno);
      return false;
    }
    const Io r = wait_ready(fd.get(), POLLOUT, lim, Clock::now());
    if (r != Io::ok) {
      *why = r == Io::cancelled ? "cancelled while connecting"
             : Clock::now() >= lim.deadline
                 ? "overall timeout while connecting"
                 : "stalled: nothing for " + std::to_string(lim.stall.count()) + " ms while connecting";
      return false;
    }
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
      *why = "cannot connect: " + errno_text(err);
      return false;
    }
  }
  *out = std::move(fd);
  return true;
}

Io wait_ready(int fd, short events, const IoLimits &lim, Clock::time_point last_progress) {
  for (;;) {
    if (lim.cancel && lim.cancel->load()) return Io::cancelled;
    auto now = Clock::now();
    auto until = std::min(lim.deadline, last_progress + lim.stall);
    if (now >= until) return Io::timeout;
    auto wait = std::min(std::chrono::duration_cast<milliseconds>(until - now) + milliseconds(1), kTick);
    pollfd p[2] = {{fd, events, 0}, {lim.stop_fd, POLLIN, 0}};
    int n = ::poll(p, lim.stop_fd >= 0 ? 2 : 1, int(wait.count()));
    if (n < 0 && errno != EINTR) return Io::reset;
    if (n <= 0) continue;
    if (lim.stop_fd >= 0 && (p[1].revents & POLLIN)) return Io::cancelled;
    if (p[0].revents) return Io::ok;  // readable, writable, or an error the next call reports
  }
}

Io read_all(int fd, uint8_t *buf, size_t n, const IoLimits &lim, size_t *got, int *err) {
  *got = 0;
  auto last = Clock::now();
  while (*got < n) {
    ssize_t r = ::recv(fd, buf + *got, n - *got, MSG_DONTWAIT);
    if (r > 0) {
      *got += size_t(r);
      last = Clock::now();
      // While bytes keep coming poll() is never reached: look at the limits here too.
      if (lim.cancel && lim.cancel->load()) return Io::cancelled;
      if (last >= lim.deadline && *got < n) return Io::timeout;
      continue;
    }
    if (r == 0) return Io::closed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return Io::reset;
    }
    Io w = wait_ready(fd, POLLIN, lim, last);
    if (w != Io::ok) return w;
  }
  return Io::ok;
}

Io write_all(int fd, iovec *iov, int iovcnt, const IoLimits &lim, int *err) {
  auto last = Clock::now();
  while (iovcnt > 0) {
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = size_t(iovcnt);
    ssize_t r = ::sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      size_t left = size_t(r);
      while (iovcnt > 0 && left >= iov->iov_len) {
        left -= iov->iov_len;
        ++iov;
        --iovcnt;
      }
      if (iovcnt > 0) {
        iov->iov_base = static_cast<uint8_t *>(iov->iov_base) + left;
        iov->iov_len -= left;
      }
      if (r > 0) {
        last = Clock::now();
        if (lim.progress) lim.progress->fetch_add(uint64_t(r));
      }
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return Io::reset;
    }
    Io w = wait_ready(fd, POLLOUT, lim, last);
    if (w != Io::ok) return w;
  }
  return Io::ok;
}
void encode_request(uint8_t *b, uint64_t run, int64_t min_epoch, uint16_t flags) {
  put32(b, kStateRequestMagic);
  put16(b + 4, kStateWireVersion);
  put16(b + 6, flags);
  put64(b + 8, run);
  put64(b + 16, uint64_t(min_epoch));
  put32(b + 24, crc(b, 24));
}

void encode_reply(uint8_t *b, const ReplyHeader &h) {
  put32(b, kStateReplyMagic);
  put16(b + 4, kStateWireVersion);
  put16(b + 6, uint16_t(h.status));
  put64(b + 8, uint64_t(h.epoch));
  put64(b + 16, h.total);
  put32(b + 24, h.chunk);
  put32(b + 28, h.total_crc);
  put32(b + 32, crc(b, 32));
}

}  // namespace wire
}  // namespace loom_collab
