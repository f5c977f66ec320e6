// SPDX-License-Identifier: Apache-2.0
// What loom_swarm_rogue's modes share (rogue_peer.cpp, rogue_poison.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "dht.h"

namespace loom_collab {

// Milliseconds since the Unix epoch: the clock records carry.
inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A DHT node on loopback that joined through bootstrap ("-": none, it starts
// a swarm of its own); null, said on stderr, if it reached nobody in 10 s.
inline std::unique_ptr<SwarmDht> join_dht(const std::string &bootstrap) {
  DhtConfig config;
  config.listen_host = "127.0.0.1";
  if (bootstrap != "-") config.bootstrap = {bootstrap};
  auto dht = std::make_unique<SwarmDht>(config);
  if (!dht->wait_connected(std::chrono::seconds(10))) {
    std::fprintf(stderr, "rogue: could not reach %s\n", bootstrap.c_str());
    return nullptr;
  }
  return dht;
}

}  // namespace loom_collab
