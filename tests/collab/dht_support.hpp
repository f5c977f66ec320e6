// SPDX-License-Identifier: Apache-2.0
// Real SwarmDht nodes on loopback for the DHT tests (dht_test.cpp,
// dht_watch_test.cpp): UDP ports chosen by the OS, warnings kept visible.
#ifndef LOOM_TESTS_COLLAB_DHT_SUPPORT_HPP
#define LOOM_TESTS_COLLAB_DHT_SUPPORT_HPP

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dht.h"

namespace loom_collab::dht_test {

constexpr std::chrono::milliseconds kConnect{5000};
constexpr std::chrono::milliseconds kOp{3000};

// Keeps OpenDHT's and our warnings visible in the test log, debug dropped.
inline LogFn test_log() {
  return [](Level level, const std::string &m) {
    if (level >= Level::warn) std::fprintf(stderr, "[dht %d] %s\n", static_cast<int>(level), m.c_str());
  };
}

// A node of a swarm with `key` (none: an open swarm) that bootstraps from
// `bootstrap`.
inline std::unique_ptr<SwarmDht> keyed_node(std::optional<loom_key::SwarmKey> key, std::vector<std::string> bootstrap,
                                            LogFn log = test_log()) {
  DhtConfig c;
  c.listen_host = "127.0.0.1";
  c.port = 0;
  c.bootstrap = std::move(bootstrap);
  c.key = key;
  c.log = std::move(log);
  return std::make_unique<SwarmDht>(c);
}

inline std::unique_ptr<SwarmDht> node(std::vector<std::string> bootstrap = {}) {
  return keyed_node(std::nullopt, std::move(bootstrap));
}

inline std::string addr(const SwarmDht &n) { return "127.0.0.1:" + std::to_string(n.port()); }

// A seed and n - 1 nodes that bootstrap from it, each connected.
inline std::vector<std::unique_ptr<SwarmDht>> connected_nodes(int n, std::optional<loom_key::SwarmKey> key = {}) {
  std::vector<std::unique_ptr<SwarmDht>> nodes;
  nodes.push_back(keyed_node(key, {}));
  for (int i = 1; i < n; ++i) nodes.push_back(keyed_node(key, {addr(*nodes[0])}));
  for (auto &x : nodes) EXPECT_TRUE(x->wait_connected(kConnect));
  return nodes;
}

inline Bytes bytes(const std::string &s) { return Bytes(s.begin(), s.end()); }
inline std::string text(const Bytes &b) { return std::string(b.begin(), b.end()); }

// The values as sorted strings.
inline std::vector<std::string> texts(const std::vector<Bytes> &v) {
  std::vector<std::string> out;
  for (const auto &b : v) out.push_back(text(b));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace loom_collab::dht_test

#endif
