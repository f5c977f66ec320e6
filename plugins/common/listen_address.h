/* SPDX-License-Identifier: Apache-2.0 */
// The address a plugin's sockets bind, checked before anything binds it:
// a numeric IPv4 or IPv6 address, or a name that resolves to one, that
// belongs to this machine (or the wildcard). Header-only, shared by the
// collab strategy (its `listen`) and the UCX collective (its `listen`).
#ifndef LOOM_PLUGINS_COMMON_LISTEN_ADDRESS_H
#define LOOM_PLUGINS_COMMON_LISTEN_ADDRESS_H

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace loom_net {

struct ListenAddress {
  int family = AF_UNSPEC;  // AF_INET or AF_INET6
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;  // the numeric form, e.g. "127.0.0.1"
};

inline std::string numeric_text(const sockaddr *sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

inline bool is_wildcard(const ListenAddress &a) {
  if (a.family == AF_INET) return reinterpret_cast<const sockaddr_in &>(a.addr).sin_addr.s_addr == htonl(INADDR_ANY);
  return a.family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6 &>(a.addr).sin6_addr);
}

// getaddrinfo has no timeout. lookup_address resolves node (may be null) and
// service with hints, numeric forms at once; a name (EAI_NONAME from the
// numeric try) is looked up again with name_flags on a helper thread that we
// stop waiting for after timeout (it frees its own result). Returns 0, a
// getaddrinfo error code, or kLookupTimedOut; *as_name (may be null) says
// whether node was looked up as a name.
constexpr int kLookupTimedOut = -100000;
inline int lookup_address(const char *node, const char *service, addrinfo hints, int name_flags,
                          std::chrono::milliseconds timeout, sockaddr_storage *out, socklen_t *out_len,
                          bool *as_name = nullptr) {
  if (as_name) *as_name = false;
  hints.ai_flags |= AI_NUMERICHOST;
  addrinfo *res = nullptr;
  int rc = ::getaddrinfo(node, service, &hints, &res);
  if (rc == 0) {
    std::memcpy(out, res->ai_addr, res->ai_addrlen);
    *out_len = res->ai_addrlen;
    ::freeaddrinfo(res);
    return 0;
  }
  if (rc != EAI_NONAME || node == nullptr) return rc;
  if (as_name) *as_name = true;
  struct Lookup {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    int rc = 0;
    sockaddr_storage addr{};
    socklen_t len = 0;
  };
  auto lk = std::make_shared<Lookup>();
  hints.ai_flags = name_flags;
  std::thread([lk, name = std::string(node), svc = std::string(service ? service : ""), has_service = service != nullptr,
               hints] {
    addrinfo *r = nullptr;
    const int c = ::getaddrinfo(name.c_str(), has_service ? svc.c_str() : nullptr, &hints, &r);
    std::lock_guard<std::mutex> g(lk->m);
    lk->rc = c;
    if (c == 0) {
      std::memcpy(&lk->addr, r->ai_addr, r->ai_addrlen);
      lk->len = r->ai_addrlen;
      ::freeaddrinfo(r);
    }
    lk->done = true;
    lk->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> g(lk->m);
  if (!lk->cv.wait_for(g, timeout, [&] { return lk->done; })) return kLookupTimedOut;
  if (lk->rc == 0) {
    *out = lk->addr;
    *out_len = lk->len;
  }
  return lk->rc;
}

// Resolves text (family AF_INET, AF_INET6 or AF_UNSPEC) into *out. Numeric
// addresses resolve at once; a name is looked up on a helper thread that we
// stop waiting for after timeout, since getaddrinfo itself has no timeout.
// Then a UDP socket is bound to the address (port 0, closed at once), so an
// address this machine does not have fails here (EADDRNOTAVAIL) rather than
// when the real sockets bind. On failure *why says what was wrong.
inline bool resolve_listen_address(const std::string &text, int family, std::chrono::milliseconds timeout,
                                   ListenAddress *out, std::string *why) {
  if (text.empty()) {
    *why = "it is empty";
    return false;
  }
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_DGRAM;
  bool as_name = false;
  const int rc =
      lookup_address(text.c_str(), nullptr, hints, AI_ADDRCONFIG, timeout, &out->addr, &out->len, &as_name);
  if (rc == kLookupTimedOut) {
    *why = "it does not resolve (no answer within " + std::to_string(timeout.count()) + " ms)";
    return false;
  }
  if (rc != 0) {
    *why = as_name ? std::string("it is no numeric address and does not resolve (") + ::gai_strerror(rc) + ")"
                   : std::string("it is not an address (") + ::gai_strerror(rc) + ")";
    return false;
  }
  out->family = out->addr.ss_family;
  out->text = numeric_text(reinterpret_cast<const sockaddr *>(&out->addr));
  const int fd = ::socket(out->family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = "cannot open a socket to check it: " + std::string(std::strerror(errno));
    return false;
  }
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr *>(&out->addr), out->len) == 0;
  const int err = errno;
  ::close(fd);
  if (!bound) {
    *why = err == EADDRNOTAVAIL ? "it (" + out->text + ") is not an address of this machine"
                                : "binding " + out->text + " failed: " + std::strerror(err);
    return false;
  }
  return true;
}

// The name of the network interface that holds a, e.g. "lo" for 127.0.0.1
// (any 127/8 address counts as lo's); empty when none does.
inline std::string interface_of(const ListenAddress &a) {
  ifaddrs *list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs *i = list; i && name.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != a.family) continue;
    if (a.family == AF_INET) {
      const in_addr want = reinterpret_cast<const sockaddr_in &>(a.addr).sin_addr;
      const in_addr have = reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr;
      const bool loopback = (ntohl(want.s_addr) >> 24) == 127 && (i->ifa_flags & IFF_LOOPBACK);
      if (have.s_addr == want.s_addr || loopback) name = i->ifa_name;
    } else {
      const in6_addr &want = reinterpret_cast<const sockaddr_in6 &>(a.addr).sin6_addr;
      if (std::memcmp(&reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr)->sin6_addr, &want, sizeof want) == 0)
        name = i->ifa_name;
    }
  }
  ::freeifaddrs(list);
  return name;
}

}  // namespace loom_net

#endif  // LOOM_PLUGINS_COMMON_LISTEN_ADDRESS_H
