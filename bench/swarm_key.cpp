// SPDX-License-Identifier: Apache-2.0
// The cost of a swarm key (issue 13), measured in one run on loopback with
// the collab strategy's own code (loom_collab_swarm), open against keyed,
// alternated rep by rep so both see the same machine:
//  1. a joiner loading a state of SIZE MiB from a donor (keyed: both prove
//     the key, then the state travels as the donor sealed it), once right
//     after the donor published it and once more;
//  2. a record's DHT round trip in a 4-node DHT: a put on one node, then a
//     get on another (keyed: locations keyed, records sealed), for a
//     progress-sized record and a 16 KiB one (a group's address exchange).
// Prints the medians and keyed/open ratios; the target for the load
// is at most 1.3x. bench/swarm_key.sh adds the averaging round of real peers.
// Usage: loom_bench_swarm_key [SIZE_MIB=256] [REPS=9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dht.h"
#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"

using namespace loom_collab;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

loom_key::SwarmKey bench_key() {
  loom_key::SwarmKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(i * 37 + 11);
  return k;
}

// One load of the published state; -1 on failure (printed).
double load_ms(uint16_t port, uint64_t run, const std::optional<loom_key::SwarmKey> &key, size_t want) {
  std::string why;
  const auto t = Clock::now();
  auto got = download_state({Donor{1, "127.0.0.1", port, 1}}, run, 1, std::chrono::seconds(120),
                            std::chrono::seconds(30), LogFn(), &why, nullptr, key);
  const double ms = ms_since(t);
  if (!got || got->bytes.size() != want) {
    std::fprintf(stderr, "load failed: %s\n", why.c_str());
    return -1;
  }
  return ms;
}

struct Dht4 {
  std::vector<std::unique_ptr<SwarmDht>> nodes;
  explicit Dht4(const std::optional<loom_key::SwarmKey> &key) {
    for (int i = 0; i < 4; ++i) {
      DhtConfig c;
      c.listen_host = "127.0.0.1";
      if (i > 0) c.bootstrap = {"127.0.0.1:" + std::to_string(nodes[0]->port())};
      c.key = key;
      nodes.push_back(std::make_unique<SwarmDht>(c));
    }
    for (auto &n : nodes) n->wait_connected(std::chrono::seconds(5));
  }
  // put on node 1, get on node 3 until it is there: ms, or -1.
  double round_trip(const std::string &key, const Bytes &value, uint64_t id) {
    const auto t = Clock::now();
    nodes[1]->put(key, id, value, std::chrono::seconds(60), std::chrono::milliseconds(2000));
    while (ms_since(t) < 5000) {
      for (const auto &v : nodes[3]->get(key, std::chrono::milliseconds(500)))
        if (v == value) return ms_since(t);
    }
    return -1;
  }
};

}  // namespace

int main(int argc, char **argv) {
  const size_t mib = argc > 1 ? size_t(std::atol(argv[1])) : 256;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 9;
  if (mib == 0 || reps < 1) {
    std::fprintf(stderr, "usage: %s [SIZE_MIB>0] [REPS>0]\n", argv[0]);
    return 2;
  }
  const uint64_t run = run_hash("bench-swarm-key");
  const auto key = bench_key();
  Bytes state(mib << 20);
  for (size_t i = 0; i < state.size(); ++i) state[i] = uint8_t(i * 2654435761u >> 13);

  StateServer open("127.0.0.1", 0, run, LogFn());
  StateServer keyed("127.0.0.1", 0, run, LogFn(), ServeLimits(), key);
  // Each rep publishes a new snapshot on both servers: the first load after
  // it also waits for the donor to make the snapshot ready (an open swarm's
  // CRCs, a keyed one's sealing, once per snapshot, off the training
  // thread), as a joiner that asks right after a state-averaging epoch does;
  // the second load is what every further joiner of that snapshot sees.
  // (On this VM most of a first load's time is the first touch of fresh
  // memory, per perf: page faults and the kernel's first copy from new
  // pages, for open and keyed alike. The per-snapshot line below gives the
  // checksum and seal alone.)
  std::vector<double> open_cold, keyed_cold, open_ms, keyed_ms;
  auto one = [&](StateServer &server, const std::optional<loom_key::SwarmKey> &k, int64_t epoch,
                 std::vector<double> *cold, std::vector<double> *warm) {
    server.publish(epoch, state);
    const double c = load_ms(server.port(), run, k, state.size());
    const double w = load_ms(server.port(), run, k, state.size());
    if (cold) cold->push_back(c);
    if (warm) warm->push_back(w);
  };
  one(open, std::nullopt, 1, nullptr, nullptr);  // warm-up: page faults, threads
  one(keyed, key, 1, nullptr, nullptr);
  for (int r = 0; r < reps; ++r) {
    one(open, std::nullopt, r + 2, &open_cold, &open_ms);
    one(keyed, key, r + 2, &keyed_cold, &keyed_ms);
  }
  const double o = median(open_ms), k = median(keyed_ms);
  std::printf("state load, %zu MiB, median of %d: open %.0f ms (%.2f GB/s), keyed %.0f ms (%.2f GB/s): %.2fx "
              "(target <= 1.3x)\n",
              mib, reps, o, double(state.size()) / o / 1e6, k, double(state.size()) / k / 1e6, k / o);
  const double oc = median(open_cold), kc = median(keyed_cold);
  std::printf("first load of a fresh snapshot (the donor checksums or seals it meanwhile), median of %d: open %.0f ms, "
              "keyed %.0f ms: %.2fx\n",
              reps, oc, kc, kc / oc);

  // What a donor does once per snapshot, off its training thread (and what
  // a joiner does to each chunk as it arrives): CRC-32 the chunks, or seal
  // them in place under a chunk key. The same calls the server makes.
  std::vector<double> crc_ms, seal_ms, open_chunk_ms;
  const ChunkKey chunk_key = ChunkKey::fresh();
  const uint8_t ad[kStateReplySize] = {};
  const size_t chunk = wire::state_chunk_bytes(state.size());
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    uint32_t sum = 0;
    for (size_t off = 0; off < state.size(); off += chunk)
      sum ^= wire::crc(state.data() + off, std::min<size_t>(chunk, state.size() - off));
    crc_ms.push_back(ms_since(t));
    if (sum == 0x12345678) std::printf(" ");  // keeps the sums
    std::vector<ChunkKey::Tag> tags;
    t = Clock::now();
    for (size_t off = 0, i = 0; off < state.size(); off += chunk, ++i)
      tags.push_back(chunk_key.seal(i, state.data() + off, std::min<size_t>(chunk, state.size() - off), ad,
                                    sizeof ad));
    seal_ms.push_back(ms_since(t));
    t = Clock::now();
    for (size_t off = 0, i = 0; off < state.size(); off += chunk, ++i)
      if (!chunk_key.open(i, state.data() + off, std::min<size_t>(chunk, state.size() - off), ad,
                          sizeof ad, tags[i].data())) {
        std::fprintf(stderr, "a sealed chunk did not open\n");
        return 1;
      }
    open_chunk_ms.push_back(ms_since(t));
  }
  std::printf("per snapshot of %zu MiB on one core, median of %d: CRC-32 %.0f ms (open swarm), seal %.0f ms and "
              "open %.0f ms (keyed, AES-256-GCM): seal/CRC %.2fx\n",
              mib, reps, median(crc_ms), median(seal_ms), median(open_chunk_ms), median(seal_ms) / median(crc_ms));

  Dht4 open_dht(std::nullopt), keyed_dht(key);
  for (size_t bytes : {size_t(120), size_t(16 * 1024)}) {
    std::vector<double> od, kd;
    const Bytes value(bytes, 0x5a);
    for (int r = 0; r < 20; ++r) {
      const std::string name = "bench/" + std::to_string(bytes) + "/" + std::to_string(r % 4);
      od.push_back(open_dht.round_trip(name, value, uint64_t(r) + 1));
      kd.push_back(keyed_dht.round_trip(name, value, uint64_t(r) + 1));
    }
    std::printf("DHT put and get of a %zu-byte record, median of 20: open %.2f ms, keyed %.2f ms: %.2fx\n", bytes,
                median(od), median(kd), median(kd) / median(od));
  }
  return 0;
}
