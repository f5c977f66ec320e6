// SPDX-License-Identifier: Apache-2.0
// The launcher's rendezvous store: c10d's TCPStore protocol, as the
// LibTorch it is built with speaks it (1.13's, or 2.6's and later), on one
// poll() thread, non-blocking sockets, every query parsed from a buffer
// before it runs (see store_server.hpp for the wire format and the limits).
#include "store_server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <torch/version.h>  // macros only: which c10d protocol the clients speak

#include "loom/status.hpp"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

// The queries, numbered as LibTorch 1.13 puts them on the wire; 2.x's
// further ones after. wire_query() maps what the clients send onto these.
enum Query : uint8_t {
  kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kGetNumKeys, kWatchKey, kDeleteKey,
  kValidate, kAppend, kMultiGet, kMultiSet, kCancelWait, kPing, kUnknown
};
enum : uint8_t { kReady = 0, kNotReady = 1, kStopWaiting = 0, kWaitCanceled = 1 };

#if TORCH_VERSION_MAJOR >= 2
// LibTorch 2.x (c10d/TCPStoreBackend.hpp's QueryType, checked against 2.6;
// earlier 2.x releases are not checked): a client opens with VALIDATE (a
// magic number) and PING (it waits for its nonce back); WATCH_KEY is gone,
// APPEND, MULTI_GET, MULTI_SET and CANCEL_WAIT are new.
constexpr Query kWire[] = {kValidate, kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kGetNumKeys,
                           kDeleteKey, kAppend, kMultiGet, kMultiSet, kCancelWait, kPing};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
#else
constexpr Query kWire[] = {kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kGetNumKeys, kWatchKey, kDeleteKey};
constexpr uint32_t kValidationMagic = 0;
#endif

Query wire_query(uint8_t type) { return type < std::size(kWire) ? kWire[type] : kUnknown; }

int wire_code_of(Query q) {
  for (size_t i = 0; i < std::size(kWire); ++i)
    if (kWire[i] == q) return int(i);
  return -1;
}
enum : uint8_t { kKeyUpdated = 0, kKeyCreated = 1, kKeyDeleted = 2, kCallbackRegistered = 3 };

struct Conn {
  int fd = -1;
  std::string in;             // bytes received, not yet a whole query
  std::string out;            // replies not yet sent
  Clock::time_point in_since, out_since;  // when the partial query / pending reply began
  std::vector<std::string> waiting;       // the keys of an unanswered WAIT
  std::set<std::string> watched;
  std::string dropped;        // why it is to be closed ("" while it lives)
};

// Reads one query's fields from a buffer that may hold only part of it:
// `more` when the bytes ran out, `bad` (with why) when a field breaks a limit.
struct Cursor {
  std::string_view buf;
  size_t at = 0;
  bool more = false;
  std::string bad;

  bool ok() const { return !more && bad.empty(); }
  template <typename T>
  T value() {
    T v{};
    if (!ok()) return v;
    if (buf.size() - at < sizeof v) {
      more = true;
      return v;
    }
    std::memcpy(&v, buf.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string_view bytes(size_t max, const char* what) {
    const uint64_t n = value<uint64_t>();
    if (!ok()) return {};
    if (n > max) {
      bad = std::string(what) + " of " + std::to_string(n) + " bytes (at most " + std::to_string(max) + ")";
      return {};
    }
    if (buf.size() - at < n) return more = true, std::string_view{};
    std::string_view s = buf.substr(at, n);
    at += n;
    return s;
  }
};

void append_value(std::string* out, const void* v, size_t n) { out->append(static_cast<const char*>(v), n); }
void append_bytes(std::string* out, std::string_view s) {
  const uint64_t n = s.size();
  append_value(out, &n, sizeof n);
  out->append(s);
}

bool parse_int64(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

// The store and its connections; lives on the server's thread only.
class Daemon {
 public:
  explicit Daemon(const StoreServer::Limits& limits) : limits_(limits) {}
  ~Daemon() {
    for (auto& c : conns_) ::close(c->fd);
  }

  void accept_all(int listen_fd) {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or an error on that one connection
      if (conns_.size() >= limits_.max_connections) {
        report("refused a connection: " + std::to_string(conns_.size()) + " are open (at most " +
               std::to_string(limits_.max_connections) + ")");
        ::close(fd);
        continue;
      }
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      conns_.push_back(std::move(c));
    }
  }

  // The pollfds of the connections, in the order of conns_.
  void add_pollfds(std::vector<pollfd>* fds) const {
    for (const auto& c : conns_) {
      fds->push_back({c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    }
  }

  // Serves the first `polled` connections by their poll results in fds, then
  // drops those past a deadline or dropped meanwhile.
  void serve(const pollfd* fds, size_t polled, Clock::time_point now) {
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = *conns_[i];
      if (!c.dropped.empty()) continue;
      try {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(c, now);
        if (c.dropped.empty() && (fds[i].revents & POLLOUT)) send(c, now);
      } catch (const std::exception& e) {  // out of memory, say: that connection goes, the launcher stays
        drop(c, std::string("its query failed: ") + e.what());
      }
    }
    for (auto& c : conns_) {
      if (!c->dropped.empty()) continue;
      if (!c->in.empty() && now - c->in_since > limits_.partial_timeout) drop(*c, "a query did not arrive whole in time");
      else if (!c->out.empty() && now - c->out_since > limits_.partial_timeout) drop(*c, "it did not read its replies");
    }
    for (size_t i = 0; i < conns_.size();) {
      if (conns_[i]->dropped.empty()) {
        ++i;
        continue;
      }
      if (conns_[i]->dropped != "closed") report("dropped a connection: " + conns_[i]->dropped);
      ::close(conns_[i]->fd);
      conns_.erase(conns_.begin() + static_cast<long>(i));
    }
  }

 private:
  void drop(Conn& c, const std::string& why) {
    if (c.dropped.empty()) c.dropped = why;
  }

  // Says what happened on the launcher's stderr, a few times per job.
  void report(const std::string& what) {
    if (++reports_ <= 5) std::cerr << "loom launch: rendezvous store: " << what << "\n";
    if (reports_ == 5) std::cerr << "loom launch: rendezvous store: (further such events are not reported)\n";
  }

  void receive(Conn& c, Clock::time_point now) {
    char chunk[65536];
    for (int reads = 0; reads < 16; ++reads) {  // then let the others have a turn
      const ssize_t got = ::recv(c.fd, chunk, sizeof chunk, 0);
      if (got == 0) return drop(c, "closed");
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        return drop(c, "closed");
      }
      if (c.in.empty()) c.in_since = now;
      c.in.append(chunk, static_cast<size_t>(got));
      while (!c.in.empty() && c.dropped.empty()) {
        const size_t used = run_query(c);
        if (used == 0) break;  // the rest of the query is still to come
        c.in.erase(0, used);
        c.in_since = now;
      }
      if (!c.dropped.empty()) return;
    }
  }

  void send(Conn& c, Clock::time_point now) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) drop(c, "closed");
        return;
      }
      c.out.erase(0, static_cast<size_t>(n));
      c.out_since = now;
    }
  }

  void reply(Conn& c, std::string_view bytes) {
    if (!c.dropped.empty()) return;
    if (c.out.empty()) c.out_since = Clock::now();
    c.out.append(bytes);
    if (c.out.size() > 2 * limits_.max_value + (1u << 20)) return drop(c, "it did not read its replies");
    send(c, c.out_since);
  }
  template <typename T>
  void reply_value(Conn& c, T v) {
    reply(c, std::string_view(reinterpret_cast<const char*>(&v), sizeof v));
  }
  void reply_bytes(Conn& c, std::string_view s) {
    std::string msg;
    append_bytes(&msg, s);
    reply(c, msg);
  }

  // Runs the query at the start of c.in: the bytes it took, or 0 when it is
  // not whole yet (or c was dropped).
  size_t run_query(Conn& c) {
    Cursor q;
    q.buf = c.in;
    const uint8_t wire = q.value<uint8_t>();
    const Query type = wire_query(wire);
    std::string_view key, a, b;
    int64_t delta = 0;
    uint32_t word = 0;
    std::vector<std::string_view> keys, values;
    switch (type) {
      case kSet: key = q.bytes(limits_.max_key, "a key"), a = q.bytes(limits_.max_value, "a value"); break;
      case kCompareSet:
        key = q.bytes(limits_.max_key, "a key");
        a = q.bytes(limits_.max_value, "a value");
        b = q.bytes(limits_.max_value, "a value");
        break;
      case kGet: case kWatchKey: case kDeleteKey: key = q.bytes(limits_.max_key, "a key"); break;
      case kAdd: key = q.bytes(limits_.max_key, "a key"), delta = q.value<int64_t>(); break;
      case kCheck: case kWait: {
        const uint64_t n = q.value<uint64_t>();
        if (q.ok() && n > limits_.max_keys_per_query) {
          q.bad = "a query naming " + std::to_string(n) + " keys (at most " + std::to_string(limits_.max_keys_per_query) + ")";
        }
        for (uint64_t i = 0; i < n && q.ok(); ++i) keys.push_back(q.bytes(limits_.max_key, "a key"));
        break;
      }
      case kGetNumKeys: case kCancelWait: break;
      case kValidate: case kPing:
        word = q.value<uint32_t>();
        if (q.ok() && type == kValidate && word != kValidationMagic) q.bad = "a VALIDATE with a wrong magic number";
        break;
      case kAppend: key = q.bytes(limits_.max_key, "a key"), a = q.bytes(limits_.max_value, "a value"); break;
      case kMultiGet: case kMultiSet: {
        const uint64_t n = q.value<uint64_t>();
        if (q.ok() && n > limits_.max_keys_per_query) {
          q.bad = "a query naming " + std::to_string(n) + " keys (at most " + std::to_string(limits_.max_keys_per_query) + ")";
        }
        for (uint64_t i = 0; i < n && q.ok(); ++i) {
          keys.push_back(q.bytes(limits_.max_key, "a key"));
          if (type == kMultiSet) values.push_back(q.bytes(limits_.max_value, "a value"));
        }
        break;
      }
      default:
        if (q.ok()) q.bad = "unknown query type " + std::to_string(wire);
    }
    if (!q.bad.empty()) return drop(c, q.bad), 0;
    if (q.more) return 0;
    execute(c, type, std::string(key), a, b, delta, keys, values, word);
    return q.at;
  }

  void execute(Conn& c, Query type, const std::string& key, std::string_view a, std::string_view b, int64_t delta,
               const std::vector<std::string_view>& keys, const std::vector<std::string_view>& values, uint32_t word) {
    auto it = store_.find(key);
    switch (type) {
      case kValidate: return;  // checked while parsing; no answer
      case kPing: return reply_value<uint32_t>(c, word);
      case kAppend: return put(c, key, (it == store_.end() ? std::string() : it->second) + std::string(a));
      case kMultiSet:
        for (size_t i = 0; i < keys.size() && c.dropped.empty(); ++i) put(c, std::string(keys[i]), std::string(values[i]));
        return;
      case kMultiGet: {
        std::string msg;
        for (auto k : keys) {
          auto found = store_.find(std::string(k));
          if (found == store_.end()) return drop(c, "MULTI_GET of a key that is not set");
          append_bytes(&msg, found->second);
        }
        return reply(c, msg);
      }
      case kCancelWait:
        c.waiting.clear();
        return reply_value<uint8_t>(c, kWaitCanceled);
      case kUnknown: return;
      case kSet: return put(c, key, std::string(a));
      case kCompareSet:
        if (it == store_.end() ? a.empty() : it->second == a) return put(c, key, std::string(b)), reply_bytes(c, b);
        return reply_bytes(c, it == store_.end() ? a : std::string_view(it->second));
      case kGet:
        if (it == store_.end()) return drop(c, "GET of a key that is not set");
        return reply_bytes(c, it->second);
      case kAdd: {
        int64_t now = 0;
        if (it != store_.end() && !parse_int64(it->second, &now)) return drop(c, "ADD to a value that is no integer");
        if (__builtin_add_overflow(now, delta, &now)) return drop(c, "ADD overflows int64");
        put(c, key, std::to_string(now));
        return reply_value<int64_t>(c, now);
      }
      case kCheck: return reply_value<uint8_t>(c, all_set(keys) ? kReady : kNotReady);
      case kWait:
        if (all_set(keys)) return reply_value<uint8_t>(c, kStopWaiting);
        c.waiting.assign(keys.begin(), keys.end());
        return;
      case kGetNumKeys: return reply_value<int64_t>(c, static_cast<int64_t>(store_.size()));
      case kWatchKey:
        if (c.watched.size() >= limits_.max_keys_per_query) return drop(c, "too many watched keys");
        c.watched.insert(key);
        return reply_value<uint8_t>(c, kCallbackRegistered);
      case kDeleteKey: {
        if (it == store_.end()) return reply_value<int64_t>(c, 0);
        const std::string old = std::move(it->second);
        total_ -= key.size() + old.size();
        store_.erase(it);
        tell_watchers(key, kKeyDeleted, old, "");
        return reply_value<int64_t>(c, 1);
      }
    }
  }

  bool all_set(const std::vector<std::string_view>& keys) const {
    for (auto k : keys) {
      if (store_.find(std::string(k)) == store_.end()) return false;
    }
    return true;
  }

  // Stores value at key, then answers the waits it completes and tells the
  // watchers; c (the writer) is dropped when the store would grow too big.
  void put(Conn& c, const std::string& key, std::string value) {
    auto it = store_.find(key);
    const size_t before = it == store_.end() ? 0 : key.size() + it->second.size();
    if (total_ - before + key.size() + value.size() > limits_.max_total_bytes) {
      return drop(c, "the store would hold more than " + std::to_string(limits_.max_total_bytes) + " bytes");
    }
    total_ = total_ - before + key.size() + value.size();
    const bool created = it == store_.end();
    std::string old;
    if (created) {
      it = store_.emplace(key, std::move(value)).first;
    } else {
      old = std::move(it->second);
      it->second = std::move(value);
    }
    for (auto& w : conns_) {
      if (w->waiting.empty() || !w->dropped.empty()) continue;
      std::vector<std::string_view> keys(w->waiting.begin(), w->waiting.end());
      if (all_set(keys)) {
        w->waiting.clear();
        reply_value<uint8_t>(*w, kStopWaiting);
      }
    }
    tell_watchers(key, created ? kKeyCreated : kKeyUpdated, old, it->second);
  }

  void tell_watchers(const std::string& key, uint8_t what, std::string_view old, std::string_view now) {
    for (auto& w : conns_) {
      if (!w->dropped.empty() || w->watched.count(key) == 0) continue;
      std::string msg(1, static_cast<char>(what));
      append_bytes(&msg, key);
      append_bytes(&msg, old);
      append_bytes(&msg, now);
      reply(*w, msg);
    }
  }

  StoreServer::Limits limits_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, std::string> store_;
  size_t total_ = 0;  // bytes of every key and value
  int reports_ = 0;
};

}  // namespace

StoreServer::StoreServer(const sockaddr* addr, socklen_t len, int port, const Limits& limits) : limits_(limits) {
  sockaddr_storage where{};
  std::memcpy(&where, addr, std::min<size_t>(len, sizeof where));
  if (where.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(where).sin_port = htons(static_cast<uint16_t>(port));
  if (where.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(where).sin6_port = htons(static_cast<uint16_t>(port));
  auto fail = [&](const char* step) {
    const int err = errno;
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw Error::runtime(std::string("cannot serve the rendezvous store on port ") + std::to_string(port) + ": " + step +
                         ": " + std::strerror(err));
  };
  listen_fd_ = ::socket(where.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) fail("socket");
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as c10d's server does
  if (where.ss_family == AF_INET6) ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&where), len) != 0) fail("bind");
  if (::listen(listen_fd_, 1024) != 0) fail("listen");
  if (::pipe2(wake_, O_CLOEXEC) != 0) fail("pipe");
  port_ = port;
}

StoreServer::~StoreServer() {
  if (thread_.joinable()) {
    const char byte = 0;
    while (::write(wake_[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void StoreServer::start() { thread_ = std::thread([this] { run(); }); }

void StoreServer::run() {
  Daemon daemon(limits_);
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    daemon.add_pollfds(&fds);
    const int n = ::poll(fds.data(), fds.size(), 1000);  // wakes at least each second for the deadlines
    if (n < 0) {
      if (errno != EINTR) {
        std::cerr << "loom launch: rendezvous store: poll: " << std::strerror(errno) << "\n";
        return;
      }
      for (auto& p : fds) p.revents = 0;
    }
    if (fds[0].revents != 0) return;
    const size_t polled = fds.size() - 2;
    if (fds[1].revents != 0) daemon.accept_all(listen_fd_);
    daemon.serve(fds.data() + 2, polled, Clock::now());
  }
}

int StoreServer::wire_code(const std::string& query) {
  static const std::pair<const char*, Query> kNames[] = {{"set", kSet},     {"compare_set", kCompareSet},
                                                         {"get", kGet},     {"add", kAdd},
                                                         {"check", kCheck}, {"wait", kWait},
                                                         {"num_keys", kGetNumKeys}, {"delete_key", kDeleteKey}};
  for (const auto& [name, q] : kNames)
    if (query == name) return wire_code_of(q);
  return -1;
}

}  // namespace loom
