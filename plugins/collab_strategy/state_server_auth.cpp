// SPDX-License-Identifier: Apache-2.0
// A state server with a swarm key: the challenge each client gets after its
// request, and the check of its proof (state_transfer.h has the wire). Both
// run on the front thread, before a request may hold a slot or a token.
#include <sys/socket.h>

#include <algorithm>

#include "state_server_impl.h"

namespace loom_collab {

using namespace wire;
using namespace server_detail;

bool StateServer::Impl::challenge(Pending &p, Clock::time_point now) {
  p.server_nonce = StateKeys::fresh_nonce();
  uint8_t b[kStateChallengeSize];
  put32(b, kStateChallengeMagic);
  std::copy(p.server_nonce.begin(), p.server_nonce.end(), b + 4);
  // 36 bytes fit a fresh socket's buffer; a client that does not read them is not asking.
  if (::send(p.fd.get(), b, sizeof b, MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(sizeof b)) {
    guard.reject(p.addr, Rejection::idle, p.peer + " did not take the challenge of its request", now);
    return false;
  }
  p.challenged = true;
  p.want = kStateRequestSize + kStateProofSize;
  return true;
}

bool StateServer::Impl::check_proof(Pending &p, Clock::time_point now) {
  StateKeys::Nonce client;
  const uint8_t *at = p.buf + kStateRequestSize;
  std::copy(at, at + StateKeys::kNonceBytes, client.begin());
  if (keys->verify(StateKeys::kClient, p.buf, kStateRequestSize, p.server_nonce, client, at + StateKeys::kNonceBytes))
    return true;
  guard.reject(p.addr, Rejection::no_key, p.peer + " does not hold this swarm's key (its proof does not match)", now);
  answer(p.fd.get(), StateStatus::not_key_holder);
  return false;
}

}  // namespace loom_collab
