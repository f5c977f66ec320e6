/* SPDX-License-Identifier: Apache-2.0 */
// Can others connect to this peer? (state_transfer.h has the wire.) A peer
// asks another's state server to connect back to it, and its own state
// server reports the probe (StateServer::saw_probe).
#ifndef LOOM_COLLAB_DIAL_BACK_H
#define LOOM_COLLAB_DIAL_BACK_H

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "state_transfer.h"
#include "../common/swarm_key.h"

namespace loom_collab {

// Asks the state server at host:port to dial back this peer's address at
// the port in value's low 16 bits, the probe carrying value (its high 48
// bits a nonce). True once the request was taken (the probe may still
// never come); false with *why when that server was not reached or
// refused it.
// from: the local address to ask from (this peer's listen address, so the
// probe comes back where it listens); empty or 0.0.0.0: any.
bool ask_dial_back(const std::string &host, uint16_t port, uint64_t run, const std::optional<loom_key::SwarmKey> &key,
                   uint64_t value, std::chrono::milliseconds timeout, std::string *why, const std::string &from = "");

}  // namespace loom_collab

#endif
