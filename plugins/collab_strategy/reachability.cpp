// SPDX-License-Identifier: Apache-2.0
// Can others reach this peer? At setup it asks an initial peer to connect
// back (dial_back.h) and becomes a client when none can; in the background
// it compares the address it announces with the one the DHT nodes it talks
// to saw its packets come from.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dial_back.h"
#include "peer.h"

namespace loom_collab {

void Peer::check_reachable() {
  const uint16_t port = server_->port();
  std::random_device random;
  std::vector<uint64_t> asked_values;  // every probe asked for: a late one still counts
  auto ask = [&](const std::string &address, std::string *why) {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      *why = "not HOST:PORT";
      return false;
    }
    const uint64_t value = ((uint64_t(random()) << 32 | random()) << 16) | port;
    if (!ask_dial_back(address.substr(0, colon), uint16_t(std::stoul(address.substr(colon + 1))), run_, opt_.swarm_key,
                       value, std::chrono::milliseconds(3000), why, opt_.listen))
      return false;
    asked_values.push_back(value);
    return true;
  };
  auto seen_within = [&](std::chrono::milliseconds wait) {
    for (const auto until = Clock::now() + wait; Clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(20)))
      for (uint64_t v : asked_values)
        if (server_->saw_probe(v)) return true;
    return false;
  };
  const Reachability r = judge_reachability(opt_.initial_peers, ask, seen_within);
  if (r.verdict == Reachability::unknown) {
    detail("could not ask any initial peer to connect back (" + r.failures + "); assuming others can reach this peer");
    return;
  }
  if (r.verdict == Reachability::reachable) {
    detail("peer " + r.by + " connected back to this peer's port " + std::to_string(port) + ": others can reach it" +
           (r.tries > 1 ? " (at the second try)" : ""));
    return;
  }
  log(Level::warn, "peer " + r.by + " could not connect back to this peer" + r.tries_text + " (TCP port " +
                       std::to_string(port) +
                       " of the address its packets come from): it is behind NAT or a firewall that drops inbound "
                       "connections, so no group could reach it. It runs in client mode: it opens every connection "
                       "itself, averages through a full peer and serves no state. Set client_mode = true to skip "
                       "this check, or make it reachable (forward or open its ports) to run as a full peer");
  opt_.client_mode = true;
  server_.reset();
}

void Peer::check_announced_address() {
  if (opt_.client_mode) return;  // it announces nothing anyone connects to
  const int64_t now = wall_ms();
  // Until a first verdict every few seconds, then once a minute: nodes
  // report what they saw in their answers, so it comes with the traffic.
  if (now - last_address_check_ms_ < (address_verdict_.empty() ? 3000 : 60000)) return;
  last_address_check_ms_ = now;
  in_addr numeric{};
  if (::inet_pton(AF_INET, announce_host_.c_str(), &numeric) != 1) return;  // a name: nothing to compare
  const auto seen = dht_->observed_addresses();
  if (seen.empty()) return;
  const std::string announced = announce_host_ + ":" + std::to_string(port_);
  std::string verdict;
  // OpenDHT reports the address without its port (0) when it has none.
  for (const auto &[host, port] : seen)
    if (host == announce_host_ && (port == port_ || port == 0)) verdict = "ok";
  const std::string observed =
      seen.front().first + (seen.front().second ? ":" + std::to_string(seen.front().second) : "");
  if (verdict.empty()) verdict = "differs " + observed;
  if (verdict == address_verdict_) return;
  address_verdict_ = verdict;
  if (verdict == "ok") {
    detail("other peers see this peer at " + announced + ", the address it announces");
    return;
  }
  const bool same_host = seen.front().first == announce_host_;
  log(Level::warn,
      "other peers see this peer's packets come from " + observed + ", but it announces " + announced + " (" +
          (opt_.announce.empty() ? "its own address" : "option announce") + "): " +
          (same_host ? "a NAT or firewall rewrites its port" : "it is likely behind NAT") +
          ", so other peers cannot connect to the address it announces, and rounds with it and state downloads "
          "from it will fail or wait out their timeouts. Set client_mode = true (it then opens every connection itself "
          "and averages through a full peer), run it where peers can reach it, or forward TCP and UDP port " +
          std::to_string(port_) + " on its router to this machine and set announce = \"" + seen.front().first +
          "\"");
}

}  // namespace loom_collab
