// SPDX-License-Identifier: Apache-2.0
// A client-mode peer's side of relaying (relay.h): one connection, opened
// by the client, to its relay's state server.
#include <cmath>

#include "relay.h"
#include "relay_channel.h"
#include "state_client.h"

namespace loom_collab {

using namespace wire;

namespace {

std::string io_text(Io r, int err, const std::string &during) { return io_failure(r, err, "the relay", during); }

}  // namespace

struct RelayLink::Impl {
  Fd fd;
  std::string peer;
  std::unique_ptr<RelayChannel> channel;
};

RelayLink::RelayLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RelayLink::~RelayLink() = default;
const std::string &RelayLink::peer() const { return impl_->peer; }

std::unique_ptr<RelayLink> RelayLink::open(const std::string &host, uint16_t port, uint64_t run,
                                           const std::optional<loom_key::SwarmKey> &key, milliseconds timeout,
                                           std::string *why) {
  auto impl = std::make_unique<Impl>();
  impl->peer = host + ":" + std::to_string(port);
  IoLimits lim{timeout, Clock::now() + timeout, nullptr, -1};
  std::string reason;
  auto fail = [&](const std::string &what) {
    *why = "relay " + impl->peer + ": " + what;
    return nullptr;
  };
  if (!connect_to(host, port, lim, &impl->fd, &reason)) return fail(reason);
  const int fd = impl->fd.get();
  uint8_t req[kStateRequestSize];
  encode_request(req, run, 0, uint16_t(kStateFlagRelay | (key ? kStateFlagKeyed : 0)));
  iovec iov{req, sizeof req};
  int err = 0;
  Io r = write_all(fd, &iov, 1, lim, &err);
  if (r != Io::ok) return fail(io_text(r, err, "while asking it to relay"));
  std::unique_ptr<StreamSealer> out;
  std::unique_ptr<StreamOpener> in;
  if (key) {
    StateKeys keys(*key);
    KeyRefusal refusal = KeyRefusal::none;
    std::pair<StateKeys::Nonce, StateKeys::Nonce> nonces;
    if (!prove_key(fd, keys, req, lim, &in, &reason, io_text, &refusal, &nonces)) return fail(reason);
    uint8_t header[StreamSealer::kHeaderBytes];
    out = std::make_unique<StreamSealer>(keys.stream_key(nonces.second, nonces.first), header);
    iovec h{header, sizeof header};
    r = write_all(fd, &h, 1, lim, &err);
    if (r != Io::ok) return fail(io_text(r, err, "while sending this peer's stream header"));
  } else {
    uint8_t hb[kStateReplySize];
    size_t got = 0;
    r = read_all(fd, hb, sizeof hb, lim, &got, &err);
    if (r != Io::ok) return fail(io_text(r, err, "waiting for its answer"));
    if (get32(hb) != kStateReplyMagic || get32(hb + 32) != crc(hb, 32))
      return fail("its answer is not a state reply (garbage, or not a Loom peer)");
    const uint16_t status = get16(hb + 6);
    if (status != uint16_t(StateStatus::ok))
      return fail(std::string("it refused: ") +
                  (status <= uint16_t(StateStatus::not_key_holder) ? to_string(StateStatus(status)) : "unknown status") +
                  (status == uint16_t(StateStatus::bad_request) ? " (it relays for nobody, or speaks another version)"
                                                                : ""));
  }
  impl->channel = std::make_unique<RelayChannel>(fd, std::move(out), std::move(in));
  return std::unique_ptr<RelayLink>(new RelayLink(std::move(impl)));
}

bool RelayLink::exchange(RelayMessage &msg, uint64_t max_count, Clock::time_point deadline, std::string *why) {
  // Stalls are bounded by the deadline alone: the relay answers when its
  // round is over, and says nothing meanwhile.
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  IoLimits lim{std::max(milliseconds(1), left), deadline, nullptr, -1};
  Io io = Io::ok;
  std::string reason;
  msg.status = RelayStatus::contribution;
  if (!impl_->channel->send(msg, lim, &io, &reason)) {
    *why = "relay " + impl_->peer + ": " + reason;
    return false;
  }
  if (!impl_->channel->recv(&msg, max_count, lim, lim, &io, &reason)) {
    *why = "relay " + impl_->peer + ": " + (io == Io::timeout ? "no result by the round's deadline" : reason);
    return false;
  }
  if (msg.status == RelayStatus::contribution) {
    *why = "relay " + impl_->peer + ": answered with a contribution, not a result";
    return false;
  }
  if (msg.status == RelayStatus::averaged && !std::isfinite(msg.weight)) {
    *why = "relay " + impl_->peer + ": a result whose weight is not finite";
    return false;
  }
  return true;
}

}  // namespace loom_collab
