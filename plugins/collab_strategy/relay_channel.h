/* SPDX-License-Identifier: Apache-2.0 */
// One relay connection's messages (relay.h has the wire), for both ends:
// the relay's session thread (relay_serve.cpp) and the client's link
// (relay_link.cpp).
#ifndef LOOM_COLLAB_RELAY_CHANNEL_H
#define LOOM_COLLAB_RELAY_CHANNEL_H

#include <memory>
#include <string>

#include "relay.h"
#include "state_secret.h"
#include "state_wire.h"

namespace loom_collab {

class RelayChannel {
 public:
  // out and in: the keyed streams (both null in an open swarm).
  RelayChannel(int fd, std::unique_ptr<StreamSealer> out, std::unique_ptr<StreamOpener> in)
      : fd_(fd), out_(std::move(out)), in_(std::move(in)) {}

  // False with *why (and *io when the socket failed).
  bool send(const RelayMessage &m, const wire::IoLimits &lim, wire::Io *io, std::string *why);
  // Reads one message. first_byte bounds the wait for it to begin (a
  // session waits an epoch for its client's next contribution); lim bounds
  // the rest. A message of more than max_count values, a bad checksum, a
  // frame that does not open or a malformed header is a defect: false with
  // *why and *io ok.
  bool recv(RelayMessage *m, uint64_t max_count, const wire::IoLimits &lim, wire::IoLimits first_byte,
            wire::Io *io, std::string *why);

 private:
  bool send_frame(const uint8_t *p, size_t n, const wire::IoLimits &lim, wire::Io *io, std::string *why);
  // Reads a frame of exactly n bytes into p.
  bool recv_frame(uint8_t *p, size_t n, const wire::IoLimits &lim, const wire::IoLimits *first, wire::Io *io,
                  std::string *why);
  int fd_;
  std::unique_ptr<StreamSealer> out_;
  std::unique_ptr<StreamOpener> in_;
};

}  // namespace loom_collab

#endif
