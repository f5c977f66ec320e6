// StateServer: the donor side of a state download, serving the latest
// published snapshot on a thread per connection. The wire format is
// described in state_transfer.h.
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "state_transfer.h"
#include "state_wire.h"

namespace loom_collab {

using namespace wire;

namespace {

constexpr milliseconds kRequestTimeout{5000};       // server: a client must ask within this
constexpr milliseconds kServerStallTimeout{10000};  // server: a client that reads nothing this long is dropped
constexpr milliseconds kResolveTimeout{5000};       // server: host name lookup at start
constexpr int kMaxConnections = 16;                 // server: more are answered "busy"

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
  IoLimits lim{kServerStallTimeout, Clock::now() + kServerStallTimeout, nullptr, stop_read.get()};
  if (write_all(fd, &iov, 1, lim, &err) != Io::ok) emit(log, Level::debug, "state server: could not answer " + peer);
}

void StateServer::Impl::serve(int fd, const std::string &peer) {
  uint8_t req[kStateRequestSize];
  size_t got = 0;
  int err = 0;
  IoLimits lim{kRequestTimeout, Clock::now() + kRequestTimeout, nullptr, stop_read.get()};
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
  lim = IoLimits{kServerStallTimeout, Clock::time_point::max(), nullptr, stop_read.get()};
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

}  // namespace loom_collab
