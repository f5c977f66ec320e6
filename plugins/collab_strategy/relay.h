/* SPDX-License-Identifier: Apache-2.0 */
// Relaying for peers in client mode (client_mode = true). A peer that
// cannot accept connections (behind NAT or a firewall that drops inbound)
// never joins a group's communicator: it opens one TCP connection to a
// full peer's state server, its relay, and sends each round's contribution
// there. The relay adds it to its own (weights and weighted values add, so
// its group sees one member that brings both), and sends the round's
// result back on the same connection. Why this and not a client that
// connects to every member itself: it needs nothing of the collective
// plugin (any plugin, any algorithm, no connection between two clients),
// and it costs the client what a ring costs a member, its vector out and
// the result back, while the relay pays that once more per client.
//
// Wire, after a state request with kStateFlagRelay (state_transfer.h; with
// a key, both sides' proofs first):
//   open swarm: the server answers a 36-byte reply, status ok when it took
//     the client (busy or bad_request otherwise, then closes);
//   keyed: the accept message as for a state transfer means taken; then
//     the client sends its own stream header (24 B) for what it sends,
//     under stream_key(its nonce, the server's): the other direction's key.
//   Then messages both ways, the client's a contribution, the server's its
//   result, one result per contribution. A message is a header frame of
//   kRelayHeaderSize bytes, then its values (f32, little-endian) in frames
//   of at most kRelayFrameBytes. A frame: open, length u32, CRC-32 u32 of
//   the bytes, the bytes; keyed, length u32 and a StreamSealer frame.
//   header: magic kRelayMagic u32, kind u16, status u16, epoch i64,
//           weight f64, norm f64, count u64 (values that follow), the
//           client's peer id u64 (the relay waits for the clients it
//           serves that train at its epoch), CRC-32 of the previous 48
//           bytes u32, codec u8 (compression.h's Codec: how the values
//           travel), 3 zero bytes. With a codec other than none the values
//           are encoded_bytes(codec, count) bytes of encode()'s output.
// A contribution's weight is its samples (gradients) or 1 (parameters),
// its values the weighted sum weight x mean (with a codec: the mean, which
// fp16's range holds, and the relay weighs it); norm, that of its mean
// (gradients; -1 unknown). A result's weight is the whole group's, its
// values the group's mean (count 0 unless averaged), in the codec the
// contribution came in. Under local updates the values are pseudo-gradients
// (anchor minus parameters) and the client steps its outer optimizer with
// the mean, as its relay does; resync tells it that its outer state no
// longer matches the group's (the group took the mean of differing ones):
// its values are then the mean, the group's agreed anchor and its
// momentum (3 x count, always f32), and norm the outer step count, so the
// client takes that state and steps as its relay does (with no values it
// loads the state instead). A client sends its gradients in the swarm's
// compression; state averaging through a relay travels in f32 (the relay
// cannot know the client's last synced parameters, so a lossy codec would
// round the weights, not their drift).
#ifndef LOOM_COLLAB_RELAY_H
#define LOOM_COLLAB_RELAY_H

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compression.h"
#include "log.h"
#include "state_transfer.h"
#include "../common/swarm_key.h"

namespace loom_collab {

constexpr uint16_t kStateFlagRelay = 4;
constexpr uint32_t kRelayMagic = 0x4d4c524c;  // "LRLM"
constexpr size_t kRelayHeaderSize = 56;
constexpr size_t kRelayFrameBytes = 256 * 1024;

enum class RelayKind : uint16_t { gradients = 1, parameters = 2 };

enum class RelayStatus : uint16_t {
  contribution = 0,  // a client's message
  averaged = 1,      // values hold the group's mean
  missed = 2,        // the relay's round went without it (too late, or no round this epoch)
  refused = 3,       // not counted: wrong size, not finite, an outlier, or the relay cannot relay now
  resync = 4,        // counted, but (local updates) the group took the mean of differing outer states
                     // before its outer step: the client takes that state (or loads the state)
};
const char *to_string(RelayStatus s);

struct RelayMessage {
  RelayKind kind = RelayKind::gradients;
  RelayStatus status = RelayStatus::contribution;
  int64_t epoch = 0;
  double weight = 0;
  double norm = -1;
  uint64_t peer = 0;  // the client's peer id (its progress record's)
  Codec codec = Codec::none;  // how values travel; a contribution's values are then its mean
  std::vector<float> values;
  std::string why;  // a refusal's or miss's reason (not on the wire: the relay logs it)
};

// A client's contribution as its relay (a full peer, Peer in peer.h) holds
// it: from the client's session thread until the relay's round takes it
// and answers it with `result`.
struct RelayEntry {
  std::string client;
  RelayKind kind = RelayKind::gradients;
  uint64_t peer = 0;
  int64_t epoch = 0;
  double weight = 0, norm = -1;
  std::vector<float> values;
  bool taken = false, answered = false;  // under the relay's relay_mutex_
  RelayMessage result;
};

// A client-mode peer's connection to its relay. Not thread-safe: one
// training thread uses it.
class RelayLink {
 public:
  // Connects to the relay's state server at host:port and is taken as its
  // client, within timeout; with key, both prove they hold it. Null with
  // *why when refused or unreachable.
  static std::unique_ptr<RelayLink> open(const std::string &host, uint16_t port, uint64_t run,
                                         const std::optional<loom_key::SwarmKey> &key,
                                         std::chrono::milliseconds timeout, std::string *why);
  ~RelayLink();
  RelayLink(const RelayLink &) = delete;
  RelayLink &operator=(const RelayLink &) = delete;

  // Sends msg (a contribution) and replaces it by the relay's result,
  // whose values may be at most max_count, by deadline. False with *why:
  // the link is then broken (open another).
  bool exchange(RelayMessage &msg, uint64_t max_count, std::chrono::steady_clock::time_point deadline,
                std::string *why);
  const std::string &peer() const;  // "host:port" of the relay

  struct Impl;

 private:
  explicit RelayLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom_collab

#endif
