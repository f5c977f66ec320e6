// SPDX-License-Identifier: Apache-2.0
// Dial-back (state_transfer.h): can others connect to this peer? Its state
// server asks another peer's to connect back to the address its request
// came from, and watches for the probe. The probe goes only to the
// requester's own IP, so nobody can aim a peer at a third party.
#include <algorithm>
#include <memory>

#include "dial_back.h"
#include "state_client.h"
#include "state_server_impl.h"
#include "thread_name.h"

namespace loom_collab {

using namespace wire;
using namespace server_detail;

namespace {

constexpr size_t kMaxProbes = 64;
constexpr milliseconds kDialTimeout{3000};

}  // namespace

void StateServer::Impl::note_probe(Pending &p, Clock::time_point now) {
  const uint8_t *b = p.buf;
  if (get16(b + 4) != kStateWireVersion || get32(b + 24) != crc(b, 24) || get64(b + 8) != run) {
    guard.reject(p.addr, Rejection::garbage, p.peer + " sent a dial-back probe that is not this run's (or garbled)", now);
    return;
  }
  std::lock_guard<std::mutex> g(m);
  probes.push_back(get64(b + 16));
  if (probes.size() > kMaxProbes) probes.erase(probes.begin());
  emit(log, Level::debug, "state server: a dial-back probe arrived from " + p.peer);
}

void StateServer::Impl::dial_back(Transfer &t) {
  name_this_thread("collab-dial");
  t.end = End::went_away;
  int err = 0;
  IoLimits lim{limits.idle_timeout, Clock::now() + kDialTimeout, &t.cancel, stop_read.get(), nullptr};
  if (t.keyed) {
    bool ok = false;
    accept_keyed(t, lim, &err, &ok);  // the client needs no more than that it was heard
    if (!ok) return;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(t.fd.get(), reinterpret_cast<sockaddr *>(&ss), &len) != 0) return;
  const uint64_t value = uint64_t(t.min_epoch);
  const uint16_t port = uint16_t(value & 0xffff);
  std::string host = address_text(reinterpret_cast<sockaddr *>(&ss));
  host = host.front() == '[' ? host.substr(1, host.rfind(']') - 1) : host.substr(0, host.rfind(':'));
  if (port == 0) return;
  Fd fd;
  std::string why;
  if (!connect_to(host, port, lim, &fd, &why)) {
    emit(log, Level::debug, "state server: dial-back to " + host + ":" + std::to_string(port) + " failed: " + why);
    t.end = End::sent;
    return;
  }
  uint8_t probe[kStateRequestSize];
  encode_request(probe, run, int64_t(value), 0);
  put32(probe, kStateProbeMagic);
  put32(probe + 24, crc(probe, 24));
  iovec iov{probe, sizeof probe};
  write_all(fd.get(), &iov, 1, lim, &err);
  t.end = End::sent;
}

bool ask_dial_back(const std::string &host, uint16_t port, uint64_t run, const std::optional<loom_key::SwarmKey> &key,
                   uint64_t value, milliseconds timeout, std::string *why, const std::string &from) {
  IoLimits lim{timeout, Clock::now() + timeout, nullptr, -1};
  Fd fd;
  if (!connect_to(host, port, lim, &fd, why, from == "0.0.0.0" ? std::string() : from)) return false;
  uint8_t req[kStateRequestSize];
  encode_request(req, run, int64_t(value), uint16_t(kStateFlagDialBack | (key ? kStateFlagKeyed : 0)));
  iovec iov{req, sizeof req};
  int err = 0;
  if (write_all(fd.get(), &iov, 1, lim, &err) != Io::ok) {
    *why = "the request could not be sent";
    return false;
  }
  auto io_text = [](Io r, int e, const std::string &during) { return io_failure(r, e, "the peer", during); };
  if (key) {
    StateKeys keys(*key);
    std::unique_ptr<StreamOpener> stream;
    KeyRefusal refusal = KeyRefusal::none;
    return prove_key(fd.get(), keys, req, lim, &stream, why, io_text, &refusal);
  }
  // An open server says nothing unless it refuses; give a refusal a moment
  // to arrive so it can be reported.
  uint8_t b[kStateReplySize];
  size_t got = 0;
  IoLimits brief{milliseconds(200), Clock::now() + milliseconds(200), nullptr, -1};
  if (read_all(fd.get(), b, sizeof b, brief, &got, &err) == Io::ok && get32(b) == kStateReplyMagic &&
      get16(b + 6) != uint16_t(StateStatus::ok)) {
    const uint16_t status = get16(b + 6);
    *why = std::string("it refused: ") +
           (status <= uint16_t(StateStatus::not_key_holder) ? to_string(StateStatus(status)) : "unknown status");
    return false;
  }
  return true;
}

Reachability judge_reachability(const std::vector<std::string> &initial_peers,
                                const std::function<bool(const std::string &, std::string *)> &ask,
                                const std::function<bool(milliseconds)> &seen_within, milliseconds first_wait,
                                milliseconds second_wait) {
  Reachability r;
  std::vector<std::string> silent;
  const size_t n = initial_peers.size();
  for (size_t k = 0; k < 2 * n && silent.size() < 2; ++k) {
    const std::string &address = initial_peers[k % n];
    std::string why;
    if (!ask(address, &why)) {
      if (k < n) r.failures += (r.failures.empty() ? "" : "; ") + address + ": " + why;
      continue;
    }
    ++r.tries;
    if (seen_within(silent.empty() ? first_wait : second_wait)) {
      r.verdict = Reachability::reachable;
      r.by = address;
      return r;
    }
    silent.push_back(address);
  }
  if (silent.empty()) return r;  // unknown: nobody could be asked
  r.verdict = Reachability::unreachable;
  r.by = silent.back();
  if (silent.size() == 2) r.tries_text = silent[0] == silent[1] ? " (asked twice)" : " (nor could " + silent[0] + ")";
  return r;
}

}  // namespace loom_collab
