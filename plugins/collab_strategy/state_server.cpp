// SPDX-License-Identifier: Apache-2.0
// StateServer: the donor side of a state download. One front thread accepts
// connections and reads their requests (a poll loop: no thread or buffer per
// connection that has not yet asked); each valid request gets a transfer
// thread (state_serve.cpp). The limits (ServeLimits, state_transfer.h)
// decide who is dropped.
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <stdexcept>
#include <system_error>

#include "../common/huge_pages.h"
#include "progress_shards.h"
#include "relay.h"
#include "state_server_impl.h"
#include "thread_name.h"

namespace loom_collab {

using namespace wire;
using namespace server_detail;

StateServer::StateServer(const std::string &host, uint16_t port, uint64_t run, LogFn log, const ServeLimits &limits,
                         const std::optional<loom_key::SwarmKey> &key)
    : impl_(std::make_unique<Impl>(limits, std::move(log))) {
  if (limits.max_transfers < 1 || limits.max_pending_per_address < 1 || !(limits.requests_per_minute > 0) ||
      limits.idle_timeout.count() < 1)
    throw std::invalid_argument("state server limits must be positive");
  Impl &s = *impl_;
  s.run = run;
  if (key) s.keys = std::make_unique<StateKeys>(*key);
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
  s.front = std::thread([&s] { s.front_loop(); });
  try {
    s.summer = std::thread([&s] { s.sum_loop(); });
  } catch (const std::system_error &e) {  // stop the front thread before Impl goes (a joinable thread would terminate)
    s.stopping = true;
    uint8_t one = 1;
    (void)!::write(s.stop_write.get(), &one, 1);
    s.front.join();
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
  if (s.front.joinable()) s.front.join();
  if (s.summer.joinable()) s.summer.join();
  s.watch_transfers(true, Clock::now());
}

uint16_t StateServer::port() const { return impl_->port; }

void StateServer::publish(int64_t epoch, Bytes bytes) {
  auto snap = std::make_shared<Snapshot>();
  snap->epoch = epoch;
  snap->bytes = std::move(bytes);
  snap->keyed = impl_->keys != nullptr;
  {
    std::lock_guard<std::mutex> g(impl_->m);
    impl_->snapshot = std::move(snap);
    impl_->generation.fetch_add(1);
    impl_->wanted = false;
  }
  impl_->published.notify_all();
}

void StateServer::publish_copy(int64_t epoch, const uint8_t *data, size_t len) {
  Bytes bytes;
  {
    // The last snapshot's storage, when no transfer (nor the summer) holds
    // it any more: a fresh buffer of a state's size costs a page fault per
    // 4 KiB, which made handing a 130 MB state over take over a second on a
    // busy machine.
    std::lock_guard<std::mutex> g(impl_->m);
    if (impl_->snapshot && impl_->snapshot.use_count() == 1) {
      bytes = std::move(impl_->snapshot->bytes);
      impl_->snapshot.reset();
    }
    if (bytes.capacity() < len && impl_->spare.capacity() >= len) bytes.swap(impl_->spare);
  }
  loom_plugin_common::reserve_huge(bytes, len);
  bytes.assign(data, data + len);
  publish(epoch, std::move(bytes));
}

void StateServer::prepare(size_t len) {
  {
    // Storage publish_copy would reuse counts: a joiner that loaded a state
    // has it published already.
    std::lock_guard<std::mutex> g(impl_->m);
    if (impl_->spare.capacity() >= len || (impl_->snapshot && impl_->snapshot->bytes.capacity() >= len)) return;
  }
  Bytes fresh;
  loom_plugin_common::reserve_huge(fresh, len);
  fresh.resize(fresh.capacity());  // writes every page: the faults happen here, not in a joiner's wait
  std::lock_guard<std::mutex> g(impl_->m);
  if (impl_->spare.capacity() < len) impl_->spare.swap(fresh);
}

void StateServer::publish_model(Bytes record) {
  if (record.size() > kMaxModelBytes)
    throw std::invalid_argument("model record of " + std::to_string(record.size()) + " bytes, above " +
                                std::to_string(kMaxModelBytes));
  std::shared_ptr<Snapshot> snap;
  if (!record.empty()) {
    snap = std::make_shared<Snapshot>();
    snap->bytes = std::move(record);
    snap->keyed = impl_->keys != nullptr;
  }
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->model = std::move(snap);
}

bool StateServer::wanted() const { return impl_->wanted.load(); }
int StateServer::active() const { return impl_->active.load(); }
uint64_t StateServer::chunks_sent() const { return impl_->chunks_out.load(); }

int StateServer::pending() const { return impl_->pending_count.load(); }
void StateServer::set_wait_for_publish(std::chrono::milliseconds ms) { impl_->wait_ms = ms.count(); }

void StateServer::set_relay(RelayHandler handler, int max_clients, uint64_t max_values) {
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->relay_handler = std::move(handler);
  impl_->max_relayed = impl_->relay_handler != nullptr ? max_clients : 0;
  impl_->max_relay_values = max_values;
}

int StateServer::relaying() const { return impl_->relaying.load(); }

bool StateServer::saw_probe(uint64_t value) const {
  std::lock_guard<std::mutex> g(impl_->m);
  return std::find(impl_->probes.begin(), impl_->probes.end(), value) != impl_->probes.end();
}

void StateServer::Impl::sum_loop() {
  name_this_thread("collab-sum");
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
    if (snap) snap->ensure_ready([&] { return stopping.load() || generation.load() != gen; });
  }
}

void StateServer::Impl::front_loop() {
  name_this_thread("collab-serve");
  std::vector<pollfd> fds;
  std::vector<std::list<Pending>::iterator> of;
  while (!stopping) {
    fds.assign({{listener.get(), POLLIN, 0}, {stop_read.get(), POLLIN, 0}});
    of.clear();
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      fds.push_back({it->fd.get(), POLLIN, 0});
      of.push_back(it);
    }
    int n = ::poll(fds.data(), fds.size(), int(kTick.count()));
    if (n < 0 && errno != EINTR) break;
    const auto now = Clock::now();
    if (fds[1].revents & POLLIN) break;
    watch_transfers(false, now);  // first, so that slots and tokens freed are there for the requests below
    for (size_t i = 0; i < of.size(); ++i)
      if (fds[i + 2].revents && read_request(*of[i], now)) pending.erase(of[i]);
    if (fds[0].revents & POLLIN) accept_some(now);
    // Whoever has not asked within the idle timeout is dropped: an honest
    // client sends its 28 bytes at once (and, with a key, its proof).
    while (!pending.empty() && now - pending.front().since >= limits.idle_timeout) {
      Pending &p = pending.front();
      guard.reject(p.addr, p.got ? Rejection::slow_request : Rejection::idle,
                   p.peer + " sent " + std::to_string(p.got) + " of " + std::to_string(p.want) +
                       " request bytes in " + std::to_string(limits.idle_timeout.count()) + " ms" +
                       (p.challenged ? " (its proof of the swarm key never came)" : ""),
                   now);
      pending.pop_front();
    }
    pending_count = int(pending.size());
    guard.flush(now);
  }
}

void StateServer::Impl::accept_some(Clock::time_point now) {
  for (int i = 0; i < kAcceptBurst; ++i) {
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
      return;
    }
    Pending p;
    p.fd = Fd(fd);
    p.peer = address_text(reinterpret_cast<sockaddr *>(&addr));
    p.addr = address_key(reinterpret_cast<sockaddr *>(&addr));
    p.since = now;
    set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
    if (read_request(p, now)) continue;  // the request came with the connection (the usual case)
    make_room(p.addr, now);
    pending.push_back(std::move(p));
  }
}

// Per address at most max_pending_per_address, in all kMaxPending: the
// oldest goes, so a flood from one address only churns its own connections,
// and a newcomer that sends its request at once is always read.
void StateServer::Impl::make_room(const std::string &addr, Clock::time_point now) {
  size_t same = 0;
  for (const auto &p : pending) same += p.addr == addr;
  auto oldest = pending.end();
  if (same >= size_t(limits.max_pending_per_address))
    oldest = std::find_if(pending.begin(), pending.end(), [&](const Pending &p) { return p.addr == addr; });
  else if (pending.size() >= kMaxPending)
    oldest = pending.begin();
  if (oldest == pending.end()) return;
  guard.reject(oldest->addr, oldest->got ? Rejection::slow_request : Rejection::idle,
               oldest->peer + " was dropped after sending " + std::to_string(oldest->got) + " of " +
                   std::to_string(kStateRequestSize) + " request bytes, to make room for a newer connection",
               now);
  pending.erase(oldest);
}

bool StateServer::Impl::read_request(Pending &p, Clock::time_point now) {
  if (p.pushing) return read_push(p, now);
  ssize_t r = ::recv(p.fd.get(), p.buf + p.got, p.want - p.got, MSG_DONTWAIT);
  if (r > 0) p.got += size_t(r);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    emit(log, Level::debug,
         "state server: " + p.peer + " sent " + std::to_string(p.got) + " of " + std::to_string(p.want) +
             " request bytes, then left");
    return true;
  }
  if (p.got < p.want) return false;
  if (!p.challenged) {
    if (!check_request(p, now)) return true;
    if (get16(p.buf + 6) & kStateFlagProgressPush) {
      p.pushing = true;
      return read_push(p, now);
    }
    return after_request(p, now);
  }
  if (!check_proof(p, now)) return true;
  admit(p, now);
  return true;
}

bool StateServer::Impl::after_request(Pending &p, Clock::time_point now) {
  if (keys) return !challenge(p, now);  // its proof is read next, within the same idle timeout
  admit(p, now);
  return true;
}

// A reply that is all the client gets (36 bytes fit a fresh socket's buffer;
// if not, the client was not reading anyway).
void StateServer::Impl::answer(int fd, StateStatus status) {
  ReplyHeader h;
  h.status = status;
  uint8_t b[kStateReplySize];
  encode_reply(b, h);
  (void)!::send(fd, b, sizeof b, MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool StateServer::Impl::check_request(Pending &p, Clock::time_point now) {
  const int fd = p.fd.get();
  const std::string &peer = p.peer, &addr = p.addr;
  const uint8_t *req = p.buf;
  // Each refusal is logged (or counted) before the client hears it, so the log is in order.
  if (get32(req) == kStateProbeMagic && !p.challenged) {
    note_probe(p, now);
    return false;
  }
  if (get32(req) != kStateRequestMagic) {
    guard.reject(addr, Rejection::garbage, peer + " sent something that is not a state request (bad magic)", now);
    return false;
  }
  if (get16(req + 4) != kStateWireVersion) {
    guard.reject(addr, Rejection::wrong_request,
                 peer + " speaks version " + std::to_string(get16(req + 4)) + ", this server " +
                     std::to_string(kStateWireVersion),
                 now);
    answer(fd, StateStatus::bad_request);
    return false;
  }
  if (get32(req + 24) != crc(req, 24)) {
    guard.reject(addr, Rejection::garbage, "request from " + peer + " has a bad checksum", now);
    return false;
  }
  const uint16_t flags = get16(req + 6);
  const uint16_t kinds = flags & (kStateFlagModel | kStateFlagRelay | kStateFlagDialBack | kStateFlagRange |
                                  kStateFlagProgress | kStateFlagOob);
  int64_t range_epoch = 0;
  uint32_t range_first = 0, range_count = 0;
  unpack_range(int64_t(get64(req + 16)), &range_epoch, &range_first, &range_count);
  const uint16_t push =
      kinds == kStateFlagProgress || kinds == kStateFlagOob ? (flags & kStateFlagProgressPush) : 0;
  if ((flags & ~(kinds | push | kStateFlagKeyed)) != 0 || (kinds & (kinds - 1)) != 0 ||
      ((flags & kStateFlagRange) && range_count == 0) || (kinds == kStateFlagOob && !push)) {
    guard.reject(addr, Rejection::wrong_request,
                 peer + " sent request flags " + std::to_string(flags) + "; this server knows 0 (state), " +
                     std::to_string(kStateFlagModel) + " (model), " + std::to_string(kStateFlagRelay) + " (relay), " +
                     std::to_string(kStateFlagDialBack) + " (dial back), " + std::to_string(kStateFlagRange) +
                     " (a range of chunks, at least one), " + std::to_string(kStateFlagProgress) +
                     " (progress records), " + std::to_string(kStateFlagOob) +
                     " (an oob part; one of these six at most), " + std::to_string(kStateFlagProgressPush) +
                     " (with progress: a pushed record; with oob, required) and " + std::to_string(kStateFlagKeyed) +
                     " (keyed)",
                 now);
    answer(fd, StateStatus::bad_request);
    return false;
  }
  if (flags & kStateFlagProgress) {
    const uint64_t key = get64(req + 16);
    const uint64_t level = key >> 32, shard = key & 0xffffffffu;
    if (level > uint64_t(kMaxShardLevel) || shard >= (uint64_t(1) << level)) {
      guard.reject(addr, Rejection::wrong_request,
                   peer + " asked for the progress records of level " + std::to_string(level) + ", shard " +
                       std::to_string(shard) + "; levels are 0 to " + std::to_string(kMaxShardLevel) +
                       " and a level L has shards 0 to 2^L - 1",
                   now);
      answer(fd, StateStatus::bad_request);
      return false;
    }
  }
  if (flags & kStateFlagOob) {
    const int64_t hold = int64_t(get64(req + 16));
    if (hold < 1 || hold > kMaxOobHoldMs) {
      guard.reject(addr, Rejection::wrong_request,
                   peer + " asked for its oob reply to be held " + std::to_string(hold) + " ms; 1 to " +
                       std::to_string(kMaxOobHoldMs) + " ms is allowed",
                   now);
      answer(fd, StateStatus::bad_request);
      return false;
    }
  }
  if (keys && !(flags & kStateFlagKeyed)) {
    guard.reject(addr, Rejection::no_key, peer + " asked without the swarm key (this swarm has one)", now);
    answer(fd, StateStatus::not_key_holder);
    return false;
  }
  if (!keys && (flags & kStateFlagKeyed)) {
    guard.reject(addr, Rejection::wrong_request, peer + " offered a swarm key; this swarm has none", now);
    answer(fd, StateStatus::bad_request);
    return false;
  }
  if (get64(req + 8) != run) {
    guard.reject(addr, Rejection::wrong_request, peer + " asked for another run's state", now);
    answer(fd, StateStatus::other_run);
    return false;
  }
  return true;
}

// Notes progress, and joins and closes finished transfers (all: at shutdown).
void StateServer::Impl::watch_transfers(bool all, Clock::time_point now) {
  for (auto it = transfers.begin(); it != transfers.end();) {
    Transfer &t = *it;
    if (all) t.cancel = true;
    const uint64_t sent = t.sent.load();
    if (sent != t.seen) {
      t.seen = sent;
      t.moved = now;
    }
    if (!all && !t.done) {
      ++it;
      continue;
    }
    if (t.thread.joinable()) t.thread.join();
    const uint64_t total = t.total.load();
    const End end = t.end.load();
    if (t.progress || t.oob)  // a table sent costs its token; one not sent, nothing
      (t.oob ? oob_guard : progress_guard).give_back(t.addr, end == End::sent ? 1 : 0, now);
    else if (!t.relay)  // a session keeps its token
      guard.give_back(t.addr, total ? std::min(1.0, double(sent) / double(total)) : 0, now);  // a stream's frames add a little
    if (end == End::stalled)
      guard.reject(t.addr, Rejection::stalled,
                   "transfer to " + t.peer + " ended after " + std::to_string(sent) + " of " + std::to_string(total) +
                       " bytes: it read nothing for " + std::to_string(limits.idle_timeout.count()) + " ms",
                   now);
    if (end == End::stalled || end == End::cancelled) {
      // Reset rather than close: the kernel drops what the client never read at once.
      ::linger hard{1, 0};
      ::setsockopt(t.fd.get(), SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    }
    it = transfers.erase(it);
  }
}

}  // namespace loom_collab
