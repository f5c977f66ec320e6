// SPDX-License-Identifier: Apache-2.0
// loom_swarm_rogue's poisoned-donor mode, for the swarm test of donors:
//
//   loom_swarm_rogue --poison RUN_ID HOST:PORT SECONDS EVERY
//     joins a run's DHT and, for each state-averaging epoch the swarm
//     reaches (EVERY: the run's average_state_every), downloads that epoch's
//     state from the honest peers, negates the values of its first tensor (a
//     valid state whose parameters are poisoned, and nothing else changed)
//     and serves it as that epoch's from a real state server. Its progress
//     record copies the honest peers' epoch and the parameters' hash they
//     published, as a donor that lies about what it serves would. Prints
//     "rogue peer ID", "rogue dht HOST:PORT", "rogue poisoned the state of
//     epoch E" for each, and each change of what the honest peers' records
//     say ("rogue honest EPOCH/SYNC_EPOCH ..." in peer order).
//
// A training state is a zip archive (PyTorch's), whose entries carry CRC-32s:
// both copies of the poisoned entry's CRC (its local header's and the
// central directory's) are made good again.
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "dht.h"
#include "rogue_support.hpp"
#include "records.h"
#include "state_transfer.h"

using namespace loom_collab;

namespace {

using Clock = std::chrono::steady_clock;

uint32_t le32(const uint8_t *p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint16_t le16(const uint8_t *p) { return uint16_t(p[0] | p[1] << 8); }
void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// Negates the float32 values of the archive entry whose name ends in
// "/data/0" (the first tensor saved: the first parameter) and fixes its
// CRC-32 wherever the archive keeps it: the central directory, and the local
// header or (PyTorch's writer sets flag bit 3) the data descriptor after the
// data. False when there is no such stored (uncompressed) entry.
bool poison(Bytes &zip) {
  const std::string suffix = "/data/0";
  for (size_t at = 0; at + 46 <= zip.size(); ++at) {
    if (le32(&zip[at]) != 0x02014b50) continue;  // central directory header
    const uint16_t method = le16(&zip[at + 10]), name_len = le16(&zip[at + 28]);
    const uint32_t size = le32(&zip[at + 20]), local = le32(&zip[at + 42]);
    if (at + 46 + name_len > zip.size()) return false;
    const std::string name(reinterpret_cast<const char *>(&zip[at + 46]), name_len);
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (method != 0 || size == 0xffffffffu || size_t(local) + 30 > zip.size() || le32(&zip[local]) != 0x04034b50)
      return false;
    const uint16_t flags = le16(&zip[local + 6]);
    const size_t data = size_t(local) + 30 + le16(&zip[local + 26]) + le16(&zip[local + 28]);
    if (data + size > zip.size()) return false;
    for (size_t i = 3; i < size; i += 4) zip[data + i] ^= 0x80;  // the sign bit of each little-endian float
    const uint32_t crc = uint32_t(crc32_z(0, &zip[data], size));
    put32(&zip[at + 16], crc);
    if (flags & 0x8) {
      size_t desc = data + size;
      if (desc + 4 <= zip.size() && le32(&zip[desc]) == 0x08074b50) desc += 4;  // the optional signature
      if (desc + 4 > zip.size()) return false;
      put32(&zip[desc], crc);
    } else {
      put32(&zip[local + 14], crc);
    }
    return true;
  }
  return false;
}

}  // namespace

int poison_main(const std::string &run_id, const std::string &bootstrap, int seconds, int every) {
  if (every <= 0) {
    std::fprintf(stderr, "rogue: EVERY must be positive\n");
    return 2;
  }
  const Identity identity;
  const uint64_t run = run_hash(run_id);
  const auto node = join_dht(bootstrap);
  if (!node) return 1;
  SwarmDht &dht = *node;
  LogFn quiet = [](Level, const std::string &) {};
  StateServer server("127.0.0.1", 0, run, quiet);
  std::printf("rogue peer %llu\nrogue dht 127.0.0.1:%u\n", static_cast<unsigned long long>(identity.id()),
              unsigned(dht.port()));
  std::fflush(stdout);

  // The worker fetches the honest state of each state-averaging epoch the
  // swarm reaches (the honest donors publish it when asked), poisons it and
  // serves it as that same epoch: it differs from the honest state only by
  // the poison.
  std::mutex mutex;
  std::vector<Donor> donors;  // the honest peers, as the records say
  std::atomic<int64_t> target{0}, served_epoch{-1};
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop) {
      std::vector<Donor> from;
      {
        std::lock_guard<std::mutex> lock(mutex);
        from = donors;
      }
      const int64_t want = target.load();
      if (from.empty() || want <= served_epoch.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      std::string why;
      auto got = download_state(from, run, want, std::chrono::seconds(15), std::chrono::seconds(5), quiet, &why);
      if (!got) continue;
      Bytes poisoned = std::move(got->bytes);
      if (!poison(poisoned)) {
        std::fprintf(stderr, "rogue: the state has no stored entry */data/0 to poison\n");
        std::exit(1);
      }
      server.publish(got->epoch, std::move(poisoned));
      served_epoch = got->epoch;
      std::printf("rogue poisoned the state of epoch %lld\n", static_cast<long long>(got->epoch));
      std::fflush(stdout);
    }
  });

  const std::string key = progress_key(run_id);
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  std::map<uint64_t, ProgressRecord> honest;
  std::string said;
  ProgressRecord me;
  me.peer_id = identity.id();
  me.state_host = "127.0.0.1";
  me.since_ms = wall_ms();
  while (Clock::now() < until) {
    for (const auto &raw : dht.get(key, std::chrono::milliseconds(200))) {
      auto r = decode_progress(run, raw.data(), raw.size(), nullptr);
      if (!r || r->peer_id == identity.id() || (r->flags & ProgressRecord::kLeft)) continue;
      auto &seen = honest[r->peer_id];
      if (r->time_ms >= seen.time_ms) seen = *r;
    }
    std::string line = "rogue honest";
    int64_t epoch = 0;
    std::vector<Donor> now;
    for (const auto &[id, r] : honest) {
      if (wall_ms() - r.time_ms > 10000) continue;  // gone
      line += " " + std::to_string(r.epoch) + "/" + std::to_string(r.sync_epoch);
      epoch = std::max(epoch, r.epoch);
      if (r.sync_epoch >= me.sync_epoch && r.sync_hash != 0) {
        me.sync_epoch = r.sync_epoch;  // the honest hash, claimed as this rogue's own
        me.sync_hash = r.sync_hash;
        me.earlier_syncs = r.earlier_syncs;
      }
      me.fingerprint = r.fingerprint;
      if (r.state_port != 0 && !(r.flags & ProgressRecord::kAway)) now.push_back(Donor{id, r.state_host, r.state_port, r.epoch});
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      donors = now;
    }
    if (line != said && !now.empty()) {
      said = line;
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    target = (epoch + every - 1) / every * every;  // the swarm's next state-averaging epoch
    me.epoch = epoch;
    me.time_ms = wall_ms();
    me.state_port = served_epoch.load() >= 0 ? server.port() : 0;
    dht.put(key, me.peer_id, encode(run, me, identity), std::chrono::seconds(10), std::chrono::milliseconds(300));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  worker.join();
  me.flags = ProgressRecord::kLeft;
  me.time_ms = wall_ms();
  dht.put(key, me.peer_id, encode(run, me, identity), std::chrono::seconds(10), std::chrono::milliseconds(300));
  return 0;
}
