/* SPDX-License-Identifier: Apache-2.0 */
// Can others connect to this peer? (state_transfer.h has the wire.) A peer
// asks another's state server to connect back to it, and its own state
// server reports the probe (StateServer::saw_probe).
#ifndef LOOM_COLLAB_DIAL_BACK_H
#define LOOM_COLLAB_DIAL_BACK_H

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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

// What the dial-back tells, over the initial peers in order. One silent
// peer is no proof: a loaded one (64 peers starting at once on 2 cores)
// connected back after the wait, and a reachable peer ran as a client. So
// the verdict unreachable takes two silent tries, the second (the next
// initial peer, or the same one again) waited for longer, and a probe of
// the first try that lands during the second counts.
struct Reachability {
  enum Verdict { reachable, unreachable, unknown } verdict = unknown;
  std::string by;          // the peer that connected back, or the last silent one
  std::string tries_text;  // unreachable: "" (one try), " (asked twice)", " (nor could ADDRESS)"
  int tries = 0;           // requests taken
  std::string failures;    // unknown: each initial peer's reason it could not be asked
};
// ask(address, why): sends the request (false with *why when not taken);
// seen_within(wait): whether a probe of any request taken so far arrives
// within wait.
Reachability judge_reachability(const std::vector<std::string> &initial_peers,
                                const std::function<bool(const std::string &, std::string *)> &ask,
                                const std::function<bool(std::chrono::milliseconds)> &seen_within,
                                std::chrono::milliseconds first_wait = std::chrono::milliseconds(4000),
                                std::chrono::milliseconds second_wait = std::chrono::milliseconds(10000));

}  // namespace loom_collab

#endif
