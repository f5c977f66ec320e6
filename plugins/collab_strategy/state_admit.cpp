// SPDX-License-Identifier: Apache-2.0
// The state server's admission (state_server.cpp reads and checks the
// requests): which checked request gets a thread, a transfer slot, a relay
// session, a progress reply or a held oob reply, and which is turned away
// busy or over its rate; and which stalled transfer gives up its slot.
#include <algorithm>
#include <system_error>

#include "relay.h"
#include "state_server_impl.h"

namespace loom_collab {

using namespace wire;
using namespace server_detail;

void StateServer::Impl::admit(Pending &p, Clock::time_point now) {
  const std::string &peer = p.peer, &addr = p.addr;
  const uint8_t *req = p.buf;
  const bool relay = (get16(req + 6) & kStateFlagRelay) != 0;
  RelayHandler handler;
  uint64_t max_values = 0;
  if (relay) {
    // A session lasts as long as its client trains: it takes no transfer
    // slot, only one of max_relayed (and a request token, kept: a client
    // connects again only when its link broke).
    int most = 0;
    {
      std::lock_guard<std::mutex> g(m);
      handler = relay_handler;
      most = max_relayed;
      max_values = max_relay_values;
    }
    if (!handler || most <= 0) {
      guard.reject(addr, Rejection::wrong_request, peer + " asked to relay through this peer, which relays for nobody", now);
      answer(p.fd.get(), StateStatus::bad_request);
      return;
    }
    if (relaying.load() >= most) {
      guard.reject(addr, Rejection::busy,
                   peer + " asked to relay through this peer, which relays for " + std::to_string(most) +
                       " client-mode peers already (relay_clients)",
                   now);
      answer(p.fd.get(), StateStatus::busy);
      return;
    }
  }
  const bool progress = (get16(req + 6) & kStateFlagProgress) != 0;
  const bool oob = (get16(req + 6) & kStateFlagOob) != 0;
  if (oob) {
    // Held while the group's members arrive: its own bound and bucket.
    bool handled = false;
    {
      std::lock_guard<std::mutex> g(m);
      handled = static_cast<bool>(oob_handler);
    }
    if (!handled) {
      guard.reject(addr, Rejection::wrong_request, peer + " sent an oob part to this peer, which is no group's hub", now);
      answer(p.fd.get(), StateStatus::bad_request);
      return;
    }
    if (oob_serving.load() >= kMaxOobServes) {
      guard.reject(addr, Rejection::busy,
                   peer + " sent an oob part while " + std::to_string(kMaxOobServes) + " were being held", now);
      answer(p.fd.get(), StateStatus::busy);
      return;
    }
    if (!oob_guard.take(addr, now)) {
      guard.reject(addr, Rejection::rate,
                   peer + " is over " + std::to_string(int(kOobPerMinute)) + " oob requests per minute from " + addr,
                   now);
      answer(p.fd.get(), StateStatus::busy);
      return;
    }
  } else if (progress) {
    // Its own bucket and its own few threads: a small reply, sent at once.
    if (progress_serving.load() >= kMaxProgressServes) {
      guard.reject(addr, Rejection::busy,
                   peer + " asked for progress records while " + std::to_string(kMaxProgressServes) +
                       " such requests were being answered",
                   now);
      answer(p.fd.get(), StateStatus::busy);
      return;
    }
    if (!progress_guard.take(addr, now)) {
      guard.reject(addr, Rejection::rate,
                   peer + " is over " + std::to_string(int(kProgressPerMinute)) +
                       " progress requests per minute from " + addr,
                   now);
      answer(p.fd.get(), StateStatus::busy);
      return;
    }
    if (!p.push.empty()) {
      progress_pushed.fetch_add(1);
      std::function<void(Bytes)> handler;
      {
        std::lock_guard<std::mutex> g(m);
        handler = progress_push;
      }
      if (handler) handler(std::move(p.push));
    }
  } else if (!guard.take(addr, now)) {
    guard.reject(addr, Rejection::rate,
                 peer + " is over " + std::to_string(limits.requests_per_minute) + " requests per minute from " +
                     addr + " (serve_requests_per_minute)",
                 now);
    answer(p.fd.get(), StateStatus::busy);
    return;
  }
  // A slot: a free one, or one a stalled or slow transfer gives up. Threads
  // stay within 2 * max_transfers: those serving plus those being ended.
  // Relay sessions and progress requests are bounded on their own.
  size_t serving = 0, sessions = 0;
  for (const auto &t : transfers) {
    serving += !t.cancel && !t.done && !t.relay && !t.progress && !t.oob;
    sessions += t.relay || t.progress || t.oob;
  }
  const bool own_bound = relay || progress || oob;
  const bool room = transfers.size() - sessions < 2 * size_t(limits.max_transfers);
  Transfer *v = !own_bound && room && serving >= size_t(limits.max_transfers) ? victim(now) : nullptr;
  if (!own_bound && (!room || (serving >= size_t(limits.max_transfers) && v == nullptr))) {
    guard.give_back(addr, 0, now);
    guard.reject(addr, Rejection::busy,
                 peer + " was answered busy: " + std::to_string(serving) + " transfers under way, none stalled", now);
    answer(p.fd.get(), StateStatus::busy);
    return;
  }
  if (v) {
    v->cancel = true;
    published.notify_all();  // in case it waits for a publish
    guard.reject(v->addr, Rejection::preempted,
                 "transfer to " + v->peer + " (" + std::to_string(v->sent.load()) + " bytes sent) was ended for " +
                     peer + "'s request: it was stalled or slow and every slot was taken",
                 now);
  }
  Transfer &t = transfers.emplace_back();
  t.fd = std::move(p.fd);
  t.peer = peer;
  t.addr = addr;
  t.min_epoch = int64_t(get64(req + 16));
  t.model = (get16(req + 6) & kStateFlagModel) != 0;
  t.relay = relay;
  t.dial = (get16(req + 6) & kStateFlagDialBack) != 0;
  t.range = (get16(req + 6) & kStateFlagRange) != 0;
  t.progress = progress;
  t.oob = oob;
  if (oob) t.push = std::move(p.push);
  t.keyed = p.challenged;
  std::copy(req, req + kStateRequestSize, t.request);
  if (t.keyed) {
    t.server_nonce = p.server_nonce;
    std::copy(p.buf + kStateRequestSize, p.buf + kStateRequestSize + StateKeys::kNonceBytes, t.client_nonce.begin());
  }
  t.started = t.moved = now;
  try {
    if (relay) {
      relaying.fetch_add(1);
      t.thread = std::thread([this, &t, handler, max_values] {
        relay_session(t, handler, max_values);
        relaying.fetch_sub(1);
        t.done = true;
      });
    } else if (oob || progress) {  // each under its own bound
      std::atomic<int> &serving_now = oob ? oob_serving : progress_serving;
      serving_now.fetch_add(1);
      t.thread = std::thread([this, &t, &serving_now] {
        serve(t);
        serving_now.fetch_sub(1);
        t.done = true;
      });
    } else {
      t.thread = std::thread([this, &t] {
        if (t.dial)
          dial_back(t);
        else
          serve(t);
        t.done = true;
      });
    }
  } catch (const std::system_error &) {  // no thread to be had: turn the client away
    if (relay) relaying.fetch_sub(1);
    answer(t.fd.get(), StateStatus::busy);  // plain even when keyed: a refusal carries nothing secret
    (oob ? oob_guard : progress ? progress_guard : guard).give_back(addr, 0, now);
    transfers.pop_back();
  }
}

// The transfer that gives up its slot: the longest stalled, among those old
// enough that either moved nothing for kPreemptAfter or average below
// kSlowBytesPerSecond; nullptr when every transfer is moving well.
StateServer::Impl::Transfer *StateServer::Impl::victim(Clock::time_point now) {
  Transfer *worst = nullptr;
  for (auto &t : transfers) {
    if (t.relay || t.progress || t.oob || t.cancel || t.done || now - t.started < kPreemptAfter) continue;
    const double age = std::chrono::duration<double>(now - t.started).count();
    const bool slow = now - t.moved >= kPreemptAfter || double(t.sent.load()) / age < kSlowBytesPerSecond;
    if (slow && (worst == nullptr || t.moved < worst->moved)) worst = &t;
  }
  return worst;
}

}  // namespace loom_collab
