/* SPDX-License-Identifier: Apache-2.0 */
// The client's side of a keyed state-server handshake, shared by the
// state download (state_download.cpp) and a client-mode peer's relay link
// (relay_link.cpp): after the request, the server's challenge, this peer's
// proof, the server's proof and its stream's header.
#ifndef LOOM_COLLAB_STATE_CLIENT_H
#define LOOM_COLLAB_STATE_CLIENT_H

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"

namespace loom_collab {

// Describes a failed read or write "during" something, for *why.
using IoText = std::function<std::string(wire::Io, int, const std::string &)>;

// The usual such text: "connection closed by <peer> <during>", "timed out
// <during>", ...; err is the errno of a reset.
std::string io_failure(wire::Io r, int err, const std::string &peer, const std::string &during);

// False with *why (and *refusal when the server refused over the key).
// *stream opens what the server sends from then on; nonces, when not null,
// gets the server's and this side's nonce (in that order).
bool prove_key(int fd, const StateKeys &keys, const uint8_t *req, const wire::IoLimits &lim,
               std::unique_ptr<StreamOpener> *stream, std::string *why, const IoText &io_text, KeyRefusal *refusal,
               std::pair<StateKeys::Nonce, StateKeys::Nonce> *nonces = nullptr);

}  // namespace loom_collab

#endif
