// State download between peers: StateServer (donor side) and download_state
// (joiner side). The wire format is described in state_transfer.h.
#include "state_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

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
  }
  return "unknown status";
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kChunkSize = 4u << 20;  // what the server sends
// Socket buffers are left to the kernel's autotuning: on Linux it grows them
// to tcp_rmem/tcp_wmem's maximum (32 MiB here), while an explicit SO_RCVBUF is
// capped by net.core.rmem_max (4 MiB here) and measured slower on loopback.
constexpr milliseconds kTick{50};                   // how often waits look at stop / cancel flags
constexpr milliseconds kRequestTimeout{5000};       // server: a client must ask within this
constexpr milliseconds kServerStallTimeout{10000};  // server: a client that reads nothing this long is dropped
constexpr milliseconds kResolveTimeout{5000};       // server: host name lookup at start
constexpr int kMaxConnections = 16;                 // server: more are answered "busy"

// ---- little-endian encoding ----
void put16(uint8_t *p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint16_t get16(const uint8_t *p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t crc(const uint8_t *p, size_t n) { return uint32_t(crc32_z(0, p, n)); }

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

std::string errno_text(int e) { return std::strerror(e); }

void emit(const LogFn &log, Level l, const std::string &m) {
  if (log) log(l, m);
}

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd &&o) noexcept : fd_(o.release()) {}
  Fd &operator=(Fd &&o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
void set_int_opt(int fd, int level, int opt, int v) { ::setsockopt(fd, level, opt, &v, sizeof v); }

// ---- address lookup with a deadline ----
// getaddrinfo has no timeout: numeric addresses resolve at once; names are
// looked up on a helper thread we stop waiting for (it frees its own result).
bool resolve(const std::string &host, uint16_t port, bool passive, milliseconds timeout, sockaddr_storage *out,
             socklen_t *out_len, std::string *why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = std::to_string(port);
  const char *node = host.empty() ? nullptr : host.c_str();
  addrinfo *res = nullptr;
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc == 0) {
    std::memcpy(out, res->ai_addr, res->ai_addrlen);
    *out_len = res->ai_addrlen;
    ::freeaddrinfo(res);
    return true;
  }
  if (rc != EAI_NONAME) {
    *why = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return false;
  }
  struct Lookup {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    int rc = 0;
    sockaddr_storage addr{};
    socklen_t len = 0;
  };
  auto lk = std::make_shared<Lookup>();
  hints.ai_flags &= ~AI_NUMERICHOST;
  std::thread([lk, host, service, hints] {
    addrinfo *r = nullptr;
    int c = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &r);
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
  if (!lk->cv.wait_for(g, timeout, [&] { return lk->done; })) {
    *why = "cannot resolve " + host + ": no answer within " + std::to_string(timeout.count()) + " ms";
    return false;
  }
  if (lk->rc != 0) {
    *why = "cannot resolve " + host + ": " + ::gai_strerror(lk->rc);
    return false;
  }
  *out = lk->addr;
  *out_len = lk->len;
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

// ---- deadline-bound socket I/O ----
enum class Io { ok, closed, reset, timeout, cancelled };

// What bounds one blocking step: no progress for `stall`, the absolute
// `deadline`, a cancel flag, or a readable stop pipe (server shutdown).
struct Limits {
  milliseconds stall;
  Clock::time_point deadline;
  const std::atomic<bool> *cancel = nullptr;
  int stop_fd = -1;
};

// Waits for `events` on fd until ready, or a limit is hit. Returns ok when
// ready. last_progress is when bytes last moved.
Io wait_ready(int fd, short events, const Limits &lim, Clock::time_point last_progress) {
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

// Reads exactly n bytes. *got counts what arrived (for messages).
Io read_all(int fd, uint8_t *buf, size_t n, const Limits &lim, size_t *got, int *err) {
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

// Writes the iovecs fully (MSG_NOSIGNAL: a vanished peer is an error, not SIGPIPE).
Io write_all(int fd, iovec *iov, int iovcnt, const Limits &lim, int *err) {
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
      if (r > 0) last = Clock::now();
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

// ---- messages ----
struct Request {
  uint16_t version = 0;
  uint64_t run = 0;
  int64_t min_epoch = 0;
};

void encode_request(uint8_t *b, uint64_t run, int64_t min_epoch) {
  put32(b, kStateRequestMagic);
  put16(b + 4, kStateWireVersion);
  put16(b + 6, 0);
  put64(b + 8, run);
  put64(b + 16, uint64_t(min_epoch));
  put32(b + 24, crc(b, 24));
}

struct ReplyHeader {
  StateStatus status = StateStatus::ok;
  int64_t epoch = 0;
  uint64_t total = 0;
  uint32_t chunk = 0;
  uint32_t total_crc = 0;
};

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

// A published snapshot. Its chunk CRCs are computed once, off the training
// thread: by the server's checksum thread right after publish(), or by the
// first transfer that needs them, whichever gets there first; others wait.
// The work stops between chunks when `stop` says so (shutdown, or a newer
// snapshot made this one moot), so nobody waits long for an abandoned sum.
struct Snapshot {
  int64_t epoch = 0;
  Bytes bytes;

  // True once chunk_crcs and total_crc are valid; false if stop() said so first.
  bool ensure_sums(const std::function<bool()> &stop) {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      if (state_ == kDone) return true;
      if (stop()) return false;
      if (state_ == kBusy) {  // someone else is computing: wait for it
        cv_.wait_for(g, kTick);
        continue;
      }
      state_ = kBusy;
      g.unlock();
      std::vector<uint32_t> crcs;
      crcs.reserve(bytes.size() / kChunkSize + 1);
      uint32_t total = uint32_t(crc32_z(0, nullptr, 0));
      bool complete = true;
      for (size_t off = 0; off < bytes.size(); off += kChunkSize) {
        if (stop()) {
          complete = false;
          break;
        }
        size_t n = std::min<size_t>(kChunkSize, bytes.size() - off);
        uint32_t c = crc(bytes.data() + off, n);
        crcs.push_back(c);
        total = uint32_t(crc32_combine(total, c, z_off_t(n)));
      }
      g.lock();
      if (complete) {
        chunk_crcs = std::move(crcs);
        total_crc = total;
      }
      state_ = complete ? kDone : kIdle;
      cv_.notify_all();
    }
  }
  // Valid after ensure_sums returned true (never written again after that).
  std::vector<uint32_t> chunk_crcs;
  uint32_t total_crc = 0;

 private:
  enum { kIdle, kBusy, kDone };
  std::mutex mu_;
  std::condition_variable cv_;
  int state_ = kIdle;
};

}  // namespace

// ============================== server ==============================

struct StateServer::Impl {
  uint64_t run = 0;
  LogFn log;
  Fd listener;
  Fd stop_read, stop_write;  // a pipe: written once at shutdown, wakes every poll
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> wanted{false};
  std::atomic<int> active{0};
  std::atomic<int64_t> wait_ms{2000};

  std::mutex m;
  std::condition_variable published;
  std::shared_ptr<Snapshot> snapshot;  // guarded by m

  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<Conn> conns;  // only the accept thread and the destructor touch it
  std::thread acceptor;
  std::thread summer;                   // checksums each new snapshot ahead of requests
  std::atomic<uint64_t> generation{0};  // bumped by publish(); guarded by m for the summer's wait

  void sum_loop();

  void accept_loop();
  void serve(int fd, const std::string &peer);
  void reply_only(int fd, const ReplyHeader &h, const std::string &peer);
  void reap(bool all);
};

StateServer::StateServer(const std::string &host, uint16_t port, uint64_t run, LogFn log)
    : impl_(std::make_unique<Impl>()) {
  Impl &s = *impl_;
  s.run = run;
  s.log = std::move(log);
  const std::string where = host + ":" + std::to_string(port);
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string why;
  if (!resolve(host, port, true, kResolveTimeout, &addr, &len, &why))
    throw std::runtime_error("state server on " + where + ": " + why);
  s.listener = Fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.listener.get() < 0) throw std::runtime_error("state server on " + where + ": socket: " + errno_text(errno));
  set_int_opt(s.listener.get(), SOL_SOCKET, SO_REUSEADDR, 1);
  if (::bind(s.listener.get(), reinterpret_cast<sockaddr *>(&addr), len) != 0) {
    int e = errno;
    if (e != EADDRINUSE || port == 0)
      throw std::runtime_error("state server cannot bind " + where + ": " + errno_text(e));
    // The port is taken: any port will do, the address is published anyway.
    if (addr.ss_family == AF_INET)
      reinterpret_cast<sockaddr_in *>(&addr)->sin_port = 0;
    else
      reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port = 0;
    if (::bind(s.listener.get(), reinterpret_cast<sockaddr *>(&addr), len) != 0)
      throw std::runtime_error("state server cannot bind " + host + " (port " + std::to_string(port) +
                               " taken, any port): " + errno_text(errno));
  }
  if (::listen(s.listener.get(), 64) != 0)
    throw std::runtime_error("state server cannot listen on " + where + ": " + errno_text(errno));
  set_nonblocking(s.listener.get());
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  ::getsockname(s.listener.get(), reinterpret_cast<sockaddr *>(&bound), &blen);
  s.port = bound.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port)
                                      : ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("state server on " + where + ": pipe: " + errno_text(errno));
  s.stop_read = Fd(p[0]);
  s.stop_write = Fd(p[1]);
  s.acceptor = std::thread([&s] { s.accept_loop(); });
  try {
    s.summer = std::thread([&s] { s.sum_loop(); });
  } catch (const std::system_error &e) {  // stop the acceptor before Impl goes (a joinable thread would terminate)
    s.stopping = true;
    uint8_t one = 1;
    (void)!::write(s.stop_write.get(), &one, 1);
    s.acceptor.join();
    throw std::runtime_error("state server on " + where + ": cannot start a thread: " + e.what());
  }
  emit(s.log, Level::debug, "state server listening on " + address_text(reinterpret_cast<sockaddr *>(&bound)));
}

StateServer::~StateServer() {
  Impl &s = *impl_;
  {
    // Under the lock, so a transfer about to wait for publish() sees it.
    std::lock_guard<std::mutex> g(s.m);
    s.stopping = true;
  }
  uint8_t one = 1;
  (void)!::write(s.stop_write.get(), &one, 1);
  s.published.notify_all();
  if (s.acceptor.joinable()) s.acceptor.join();
  if (s.summer.joinable()) s.summer.join();
  s.reap(true);
}

uint16_t StateServer::port() const { return impl_->port; }

void StateServer::publish(int64_t epoch, Bytes bytes) {
  auto snap = std::make_shared<Snapshot>();
  snap->epoch = epoch;
  snap->bytes = std::move(bytes);
  {
    std::lock_guard<std::mutex> g(impl_->m);
    impl_->snapshot = std::move(snap);
    impl_->generation.fetch_add(1);
    impl_->wanted = false;
  }
  impl_->published.notify_all();
}

bool StateServer::wanted() const { return impl_->wanted.load(); }
int StateServer::active() const { return impl_->active.load(); }
void StateServer::set_wait_for_publish(std::chrono::milliseconds ms) { impl_->wait_ms = ms.count(); }

void StateServer::Impl::sum_loop() {
  uint64_t done_gen = 0;
  for (;;) {
    std::shared_ptr<Snapshot> snap;
    uint64_t gen = 0;
    {
      std::unique_lock<std::mutex> g(m);
      published.wait(g, [&] { return stopping.load() || generation.load() != done_gen; });
      if (stopping) return;
      snap = snapshot;
      gen = done_gen = generation.load();
    }
    if (snap) snap->ensure_sums([&] { return stopping.load() || generation.load() != gen; });
  }
}

void StateServer::Impl::reap(bool all) {
  for (auto it = conns.begin(); it != conns.end();) {
    if (all || it->done) {
      if (it->thread.joinable()) it->thread.join();
      it = conns.erase(it);
    } else {
      ++it;
    }
  }
}

void StateServer::Impl::accept_loop() {
  while (!stopping) {
    pollfd p[2] = {{listener.get(), POLLIN, 0}, {stop_read.get(), POLLIN, 0}};
    int n = ::poll(p, 2, int(kTick.count()));
    reap(false);
    if (n <= 0 || (p[1].revents & POLLIN)) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr *>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of fds or memory: the listener stays readable, so pause a tick
      // rather than spin. (EAGAIN or a connection reset before accept: go on.)
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        pollfd st{stop_read.get(), POLLIN, 0};
        ::poll(&st, 1, int(kTick.count()));
      }
      continue;
    }
    std::string peer = address_text(reinterpret_cast<sockaddr *>(&addr));
    set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
    if (int(conns.size()) >= kMaxConnections) {
      ReplyHeader h;
      h.status = StateStatus::busy;
      reply_only(fd, h, peer);
      ::close(fd);
      continue;
    }
    conns.emplace_back();
    Conn &c = conns.back();
    try {
      c.thread = std::thread([this, fd, peer, &c] {
        serve(fd, peer);
        ::close(fd);
        c.done = true;
      });
    } catch (const std::system_error &) {  // no thread to be had: turn the client away
      conns.pop_back();
      ReplyHeader h;
      h.status = StateStatus::busy;
      reply_only(fd, h, peer);
      ::close(fd);
    }
  }
}

void StateServer::Impl::reply_only(int fd, const ReplyHeader &h, const std::string &peer) {
  uint8_t b[kStateReplySize];
  encode_reply(b, h);
  iovec iov{b, sizeof b};
  int err = 0;
  Limits lim{kServerStallTimeout, Clock::now() + kServerStallTimeout, nullptr, stop_read.get()};
  if (write_all(fd, &iov, 1, lim, &err) != Io::ok) emit(log, Level::debug, "state server: could not answer " + peer);
}

void StateServer::Impl::serve(int fd, const std::string &peer) {
  uint8_t req[kStateRequestSize];
  size_t got = 0;
  int err = 0;
  Limits lim{kRequestTimeout, Clock::now() + kRequestTimeout, nullptr, stop_read.get()};
  if (read_all(fd, req, sizeof req, lim, &got, &err) != Io::ok) {
    emit(log, Level::debug,
         "state server: " + peer + " sent " + std::to_string(got) + " of " + std::to_string(kStateRequestSize) +
             " request bytes, then nothing");
    return;
  }
  if (get32(req) != kStateRequestMagic) {
    emit(log, Level::warn, "state server: " + peer + " sent something that is not a state request (bad magic)");
    return;
  }
  ReplyHeader h;
  if (get16(req + 4) != kStateWireVersion) {
    emit(log, Level::warn,
         "state server: " + peer + " speaks version " + std::to_string(get16(req + 4)) + ", this server " +
             std::to_string(kStateWireVersion));
    h.status = StateStatus::bad_request;
    reply_only(fd, h, peer);
    return;
  }
  if (get32(req + 24) != crc(req, 24)) {
    emit(log, Level::warn, "state server: request from " + peer + " has a bad checksum");
    return;
  }
  const uint64_t run_of_peer = get64(req + 8);
  const int64_t min_epoch = int64_t(get64(req + 16));
  if (run_of_peer != run) {
    emit(log, Level::warn, "state server: " + peer + " asked for another run's state");
    h.status = StateStatus::other_run;
    reply_only(fd, h, peer);
    return;
  }

  std::shared_ptr<Snapshot> snap;
  {
    std::unique_lock<std::mutex> g(m);
    auto fresh = [&] { return snapshot && snapshot->epoch >= min_epoch; };
    if (!fresh()) {
      // Ask the training thread for a snapshot; it publishes at its next safe point.
      wanted = true;
      published.wait_for(g, milliseconds(wait_ms.load()), [&] { return fresh() || stopping.load(); });
    }
    snap = snapshot;
  }
  if (stopping) return;
  if (!snap || snap->epoch < min_epoch) {
    h.status = snap ? StateStatus::behind : StateStatus::not_ready;
    h.epoch = snap ? snap->epoch : 0;
    emit(log, Level::info,
         "state server: " + peer + " asked for epoch >= " + std::to_string(min_epoch) + ": " +
             (snap ? "have only " + std::to_string(snap->epoch) : std::string("nothing published")));
    reply_only(fd, h, peer);
    return;
  }

  active.fetch_add(1);
  struct Done {
    std::atomic<int> &a;
    ~Done() { a.fetch_sub(1); }
  } done{active};
  if (!snap->ensure_sums([this] { return stopping.load(); })) return;
  h.status = StateStatus::ok;
  h.epoch = snap->epoch;
  h.total = snap->bytes.size();
  h.chunk = kChunkSize;
  h.total_crc = snap->total_crc;
  uint8_t hb[kStateReplySize];
  encode_reply(hb, h);
  auto t0 = Clock::now();
  lim = Limits{kServerStallTimeout, Clock::time_point::max(), nullptr, stop_read.get()};
  // The header rides with the first chunk (one send); chunks are sent from the
  // shared snapshot itself, never copied.
  size_t off = 0;
  bool first = true;
  size_t index = 0;
  do {
    if (stopping) {  // a fast reader never lets poll() see the stop pipe
      emit(log, Level::info,
           "state server: stopping; transfer to " + peer + " ended after " + std::to_string(off) + " of " +
               std::to_string(h.total) + " bytes");
      return;
    }
    size_t n = std::min<size_t>(kChunkSize, snap->bytes.size() - off);
    uint8_t ch[kStateChunkHeaderSize];
    iovec iov[3];
    int cnt = 0;
    if (first) iov[cnt++] = {hb, sizeof hb};
    if (n > 0) {
      put32(ch, uint32_t(n));
      put32(ch + 4, snap->chunk_crcs[index]);
      iov[cnt++] = {ch, sizeof ch};
      iov[cnt++] = {const_cast<uint8_t *>(snap->bytes.data() + off), n};
    }
    Io r = write_all(fd, iov, cnt, lim, &err);
    if (r != Io::ok) {
      const char *what = r == Io::timeout ? "stopped reading" : r == Io::cancelled ? "server stopping" : "went away";
      emit(log, Level::warn,
           "state server: transfer of epoch " + std::to_string(snap->epoch) + " to " + peer + " ended after " +
               std::to_string(off) + " of " + std::to_string(h.total) + " bytes: " + what +
               (err ? std::string(" (") + errno_text(err) + ")" : ""));
      return;
    }
    first = false;
    off += n;
    ++index;
  } while (off < snap->bytes.size());
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  emit(log, Level::info,
       "state server: sent epoch " + std::to_string(snap->epoch) + " (" + std::to_string(h.total) + " bytes) to " +
           peer + " in " + std::to_string(int64_t(s * 1000)) + " ms");
}

// ============================== client ==============================

namespace {

// Checks chunk CRCs on worker threads while the next chunks arrive, so a
// joiner's download is bound by the wire or by CRC speed (zlib's crc32_z does
// about 1.3 GB/s on one core here), not by their sum. Several workers keep
// up with links faster than one core's CRC; results are combined in chunk
// order into the whole-state CRC.
class Verifier {
 public:
  explicit Verifier(const uint8_t *base)
      : base_(base),
        max_workers_(std::max(1u, std::min(4u, std::thread::hardware_concurrency() / 2))),
        total_(uint32_t(crc32_z(0, nullptr, 0))) {}
  ~Verifier() {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto &w : workers_) w.join();
  }
  // The chunk's bytes at base+off must stay put and unchanged until finish().
  void push(uint64_t index, uint64_t off, uint32_t n, uint32_t want) {
    {
      std::lock_guard<std::mutex> g(m_);
      queue_.push_back({index, off, n, want});
      ++outstanding_;
    }
    cv_.notify_all();
    if (workers_.size() < max_workers_) {
      try {
        workers_.emplace_back([this] { run(); });
      } catch (const std::system_error &) {
        if (workers_.empty()) run_inline();  // no thread at all: check it here
      }
    }
  }
  // A mismatch found so far (non-blocking).
  bool failed(std::string *why) {
    std::lock_guard<std::mutex> g(m_);
    if (bad_.empty()) return false;
    *why = bad_;
    return true;
  }
  // Waits for every pushed chunk (CPU work only, no I/O); the whole CRC or a reason.
  bool finish(uint32_t *total, std::string *why) {
    std::unique_lock<std::mutex> g(m_);
    cv_.wait(g, [&] { return outstanding_ == 0 || !bad_.empty(); });
    if (!bad_.empty()) {
      *why = bad_;
      return false;
    }
    *total = total_;
    return true;
  }

 private:
  struct Item {
    uint64_t index, off;
    uint32_t n, want;
  };
  void run_inline() {
    std::unique_lock<std::mutex> g(m_);
    while (!queue_.empty() && bad_.empty()) step(g);
  }
  void run() {
    std::unique_lock<std::mutex> g(m_);
    for (;;) {
      cv_.wait(g, [&] { return quit_ || !bad_.empty() || !queue_.empty(); });
      if (quit_ || !bad_.empty()) return;
      if (!step(g)) return;
    }
  }
  // Checks the queue's first chunk (called and returns with g locked); false on a mismatch.
  bool step(std::unique_lock<std::mutex> &g) {
    Item it = queue_.front();
    queue_.pop_front();
    g.unlock();
    uint32_t c = crc(base_ + it.off, it.n);
    g.lock();
    if (c != it.want) {
      if (bad_.empty())
        bad_ =
            "chunk " + std::to_string(it.index) + " CRC mismatch (computed " + hex(c) + ", sent " + hex(it.want) + ")";
      cv_.notify_all();
      return false;
    }
    // At most one pending result per worker: fold in every one now in order.
    done_[it.index] = {c, it.n};
    while (!done_.empty() && done_.begin()->first == next_) {
      total_ = uint32_t(crc32_combine(total_, done_.begin()->second.first, z_off_t(done_.begin()->second.second)));
      done_.erase(done_.begin());
      ++next_;
      --outstanding_;
    }
    cv_.notify_all();
    return true;
  }
  const uint8_t *base_;
  const size_t max_workers_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> done_;  // index -> (crc, length), not yet folded
  uint64_t next_ = 0;                                       // the next chunk index to fold into total_
  uint64_t outstanding_ = 0;                                // pushed, not yet folded
  bool quit_ = false;
  std::string bad_;
  uint32_t total_;
  std::vector<std::thread> workers_;  // touched only by the downloading thread
};

// Asks for transparent huge pages for a big receive buffer: a fresh 4 KiB
// page per fault made page faults a large share of a download's time.
void advise_huge_pages(const uint8_t *p, size_t n) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (n < 2 * kHuge) return;
  uintptr_t begin = (uintptr_t(p) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t end = (uintptr_t(p) + n) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
}

// One attempt against one donor. Returns the state or sets *why.
std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch, Clock::time_point deadline,
                                         milliseconds stall, const std::atomic<bool> *cancel, std::string *why) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (!resolve(d.host, d.port, false, std::min(left, stall), &addr, &len, why)) return std::nullopt;
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    *why = "socket: " + errno_text(errno);
    return std::nullopt;
  }
  set_int_opt(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
  Limits lim{stall, deadline, cancel, -1};
  auto io_text = [&](Io r, int err, const std::string &during) -> std::string {
    switch (r) {
      case Io::timeout:
        return Clock::now() >= deadline ? "overall timeout " + during
                                        : "stalled: nothing for " + std::to_string(stall.count()) + " ms " + during;
      case Io::cancelled:
        return "cancelled " + during;
      case Io::closed:
        return "connection closed by donor " + during;
      case Io::reset:
        return "connection error " + during + ": " + errno_text(err);
      case Io::ok:
        break;
    }
    return "ok";
  };

  // Connect: non-blocking, bounded by the stall timeout.
  if (::connect(fd.get(), reinterpret_cast<sockaddr *>(&addr), len) != 0) {
    if (errno != EINPROGRESS) {
      *why = "cannot connect: " + errno_text(errno);
      return std::nullopt;
    }
    Io r = wait_ready(fd.get(), POLLOUT, lim, Clock::now());
    if (r != Io::ok) {
      *why = io_text(r, 0, "while connecting");
      return std::nullopt;
    }
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
      *why = "cannot connect: " + errno_text(err);
      return std::nullopt;
    }
  }

  uint8_t req[kStateRequestSize];
  encode_request(req, run, min_epoch);
  iovec iov{req, sizeof req};
  int err = 0;
  Io r = write_all(fd.get(), &iov, 1, lim, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "while sending the request");
    return std::nullopt;
  }

  uint8_t hb[kStateReplySize];
  size_t got = 0;
  r = read_all(fd.get(), hb, sizeof hb, lim, &got, &err);
  if (r != Io::ok) {
    std::string during = "in the reply header";
    if (got > 0)
      during = "after " + std::to_string(got) + " of " + std::to_string(kStateReplySize) +
               " header bytes (truncated header)";
    *why = io_text(r, err, during);
    return std::nullopt;
  }
  if (get32(hb) != kStateReplyMagic) {
    *why = "not a state reply: bad magic " + hex(get32(hb)) + " (garbage from the donor?)";
    return std::nullopt;
  }
  if (get16(hb + 4) != kStateWireVersion) {
    *why = "donor speaks wire version " + std::to_string(get16(hb + 4)) + ", this peer " +
           std::to_string(kStateWireVersion);
    return std::nullopt;
  }
  if (get32(hb + 32) != crc(hb, 32)) {
    *why = "reply header checksum mismatch";
    return std::nullopt;
  }
  ReplyHeader h;
  uint16_t status = get16(hb + 6);
  h.epoch = int64_t(get64(hb + 8));
  h.total = get64(hb + 16);
  h.chunk = get32(hb + 24);
  h.total_crc = get32(hb + 28);
  if (status > uint16_t(StateStatus::bad_request)) {
    *why = "unknown reply status " + std::to_string(status);
    return std::nullopt;
  }
  h.status = StateStatus(status);
  if (h.status != StateStatus::ok) {
    *why = to_string(h.status);
    if (h.status == StateStatus::behind)
      *why += ": has epoch " + std::to_string(h.epoch) + ", need >= " + std::to_string(min_epoch);
    return std::nullopt;
  }
  if (h.epoch < min_epoch) {
    *why = "offers epoch " + std::to_string(h.epoch) + ", need >= " + std::to_string(min_epoch) + " (donor is behind)";
    return std::nullopt;
  }
  if (h.total > kMaxStateBytes) {
    *why = "absurd total length " + std::to_string(h.total) + " bytes (limit " + std::to_string(kMaxStateBytes) + ")";
    return std::nullopt;
  }
  if (h.total > 0 && (h.chunk == 0 || h.chunk > kMaxStateChunk)) {
    *why = "bad chunk size " + std::to_string(h.chunk) + " (must be 1.." + std::to_string(kMaxStateChunk) + ")";
    return std::nullopt;
  }

  DownloadedState out;
  out.donor = d.peer_id;
  out.epoch = h.epoch;
  // Reserve address space only; pages are touched as bytes arrive,
  // so a donor that lies about the length costs only what it really sends.
  try {
    out.bytes.reserve(size_t(h.total));
  } catch (const std::exception &) {
    *why = "cannot allocate " + std::to_string(h.total) + " bytes for the state";
    return std::nullopt;
  }
  advise_huge_pages(out.bytes.data(), size_t(h.total));
  // Declared after out: destroyed (its worker joined) before out's bytes go.
  Verifier verifier(out.bytes.data());
  uint64_t off = 0;
  for (uint64_t index = 0; off < h.total; ++index) {
    if (verifier.failed(why)) return std::nullopt;
    uint8_t ch[kStateChunkHeaderSize];
    r = read_all(fd.get(), ch, sizeof ch, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    const uint32_t n = get32(ch), want_crc = get32(ch + 4);
    const uint64_t expect = std::min<uint64_t>(h.chunk, h.total - off);
    if (n != expect) {
      *why =
          "chunk " + std::to_string(index) + ": length " + std::to_string(n) + ", expected " + std::to_string(expect);
      return std::nullopt;
    }
    // Within the reserved capacity: the buffer never moves under the verifier.
    out.bytes.resize(size_t(off + n));
    r = read_all(fd.get(), out.bytes.data() + off, n, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off + got) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    verifier.push(index, off, n, want_crc);
    off += n;
  }
  uint32_t total_crc = 0;
  if (!verifier.finish(&total_crc, why)) return std::nullopt;
  if (total_crc != h.total_crc) {
    *why = "whole-state CRC mismatch (computed " + hex(total_crc) + ", sent " + hex(h.total_crc) + ")";
    return std::nullopt;
  }
  return out;
}

}  // namespace

std::optional<DownloadedState> download_state(const std::vector<Donor> &donors, uint64_t run, int64_t min_epoch,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::milliseconds stall_timeout, const LogFn &log,
                                              std::string *why, const std::atomic<bool> *cancel) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + timeout;
  std::string summary;
  auto note = [&](const std::string &s) { summary += (summary.empty() ? "" : "; ") + s; };
  if (donors.empty()) note("no donors");
  for (size_t i = 0; i < donors.size(); ++i) {
    const Donor &d = donors[i];
    const std::string name = "donor " + std::to_string(d.peer_id) + " (" + d.host + ":" + std::to_string(d.port) + ")";
    if (cancel && cancel->load()) {
      note("cancelled before " + std::to_string(donors.size() - i) + " donor(s) were tried");
      break;
    }
    if (Clock::now() >= deadline) {
      note("timeout (" + std::to_string(timeout.count()) + " ms) before " + std::to_string(donors.size() - i) +
           " donor(s) were tried");
      break;
    }
    std::string reason;
    auto t = Clock::now();
    auto got = try_donor(d, run, min_epoch, deadline, stall_timeout, cancel, &reason);
    if (got) {
      double s = std::chrono::duration<double>(Clock::now() - t).count();
      emit(log, Level::info,
           "downloaded state of epoch " + std::to_string(got->epoch) + " (" + std::to_string(got->bytes.size()) +
               " bytes) from " + name + " in " + std::to_string(int64_t(s * 1000)) + " ms");
      if (why) why->clear();
      return got;
    }
    emit(log, Level::warn, "state download from " + name + " failed: " + reason);
    note(name + ": " + reason);
  }
  if (why) *why = summary;
  return std::nullopt;
}

}  // namespace loom_collab
