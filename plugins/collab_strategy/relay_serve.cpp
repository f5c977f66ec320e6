// SPDX-License-Identifier: Apache-2.0
// A relay's session with one client-mode peer (relay.h): on its own thread,
// contribution after contribution, each answered with the round's result.
#include "relay.h"
#include "relay_channel.h"
#include "state_server_impl.h"
#include "thread_name.h"

namespace loom_collab {

using namespace wire;

namespace {

// How long a session waits for its client's next contribution: longer than
// any sane epoch. A client whose epochs are longer connects again.
constexpr milliseconds kRelayIdle{10 * 60 * 1000};

}  // namespace

void StateServer::Impl::relay_session(Transfer &t, RelayHandler handler, uint64_t max_values) {
  name_this_thread("collab-relay");
  const int fd = t.fd.get();
  int err = 0;
  IoLimits lim{limits.idle_timeout, Clock::time_point::max(), &t.cancel, stop_read.get(), &t.sent};
  std::unique_ptr<StreamSealer> out;
  std::unique_ptr<StreamOpener> in;
  t.end = End::went_away;
  if (t.keyed) {
    bool ok = false;
    out = accept_keyed(t, lim, &err, &ok);
    if (!ok) return;
    // The client's own stream, under the key of the nonces swapped: each
    // direction has a key of its own.
    uint8_t header[StreamSealer::kHeaderBytes];
    size_t got = 0;
    if (read_all(fd, header, sizeof header, lim, &got, &err) != Io::ok) return;
    in = std::make_unique<StreamOpener>(keys->stream_key(t.client_nonce, t.server_nonce), header);
    if (!in->ok()) {
      emit(log, Level::warn, "state server: client-mode peer " + t.peer + " sent a stream header that does not open");
      return;
    }
  } else {
    ReplyHeader h;  // status ok: taken
    uint8_t b[kStateReplySize];
    encode_reply(b, h);
    iovec iov{b, sizeof b};
    if (write_all(fd, &iov, 1, lim, &err) != Io::ok) return;
  }
  emit(log, Level::info, "state server: relaying for client-mode peer " + t.peer);
  RelayChannel channel(fd, std::move(out), std::move(in));
  uint64_t rounds = 0;
  std::string ended = "it left";
  for (;;) {
    RelayMessage m;
    Io io = Io::ok;
    std::string why;
    IoLimits first = lim;
    first.stall = kRelayIdle;
    if (!channel.recv(&m, max_values, lim, first, &io, &why)) {
      if (io == Io::ok) {
        emit(log, Level::warn, "state server: client-mode peer " + t.peer + " sent a bad relay message (" + why +
                                   "); its session ends");
        ended = "a bad message";
      } else if (io == Io::timeout) {
        ended = "nothing from it for " + std::to_string(kRelayIdle.count() / 1000) + " s";
      } else if (io == Io::cancelled) {
        ended = "this peer stopped";
      }
      break;
    }
    if (m.status != RelayStatus::contribution) {
      emit(log, Level::warn, "state server: client-mode peer " + t.peer + " sent a relay message of status " +
                                 to_string(m.status) + " where a contribution was due; its session ends");
      ended = "a bad message";
      break;
    }
    const Codec codec = m.codec;  // the result travels as the contribution came
    handler(t.peer, m, [&] { return stopping.load() || t.cancel.load(); });
    if (m.status != RelayStatus::resync) m.codec = codec;  // a resync's outer state travels exact
    if (!channel.send(m, lim, &io, &why)) {
      ended = "the result could not be sent (" + why + ")";
      break;
    }
    ++rounds;
  }
  t.end = End::sent;
  emit(log, Level::info, "state server: relay session of client-mode peer " + t.peer + " ended after " +
                             std::to_string(rounds) + " rounds: " + ended);
}

}  // namespace loom_collab
