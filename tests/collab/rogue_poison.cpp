// loom_swarm_rogue's poisoned-donor mode, for the swarm test of donors:
//
//   loom_swarm_rogue --poison RUN_ID HOST:PORT SECONDS EVERY
//     joins a run's DHT, downloads an honest peer's state once (a real
//     training state), negates the values of its first tensor (a valid
//     state whose parameters are poisoned) and serves it from a real state
//     server, always as the state of the swarm's next state-averaging epoch
//     (EVERY: the run's average_state_every). Its progress record copies the
//     honest peers' epoch and the parameters' hash they published, as a
//     donor that lies about what it serves would. Prints "rogue peer ID",
//     "rogue dht HOST:PORT", "rogue poisoned the state of epoch E", each
//     change of what the honest peers' records say ("rogue honest
//     EPOCH/SYNC_EPOCH ..." in peer order) and, at the end, "rogue served N".
//
// A training state is a zip archive (PyTorch's), whose entries carry CRC-32s:
// both copies of the poisoned entry's CRC (its local header's and the
// central directory's) are made good again.
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "dht.h"
#include "records.h"
#include "state_transfer.h"

using namespace loom_collab;

namespace {

using Clock = std::chrono::steady_clock;

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  DhtConfig config;
  config.listen_host = "127.0.0.1";
  config.bootstrap = {bootstrap};
  SwarmDht dht(config);
  if (!dht.wait_connected(std::chrono::seconds(10))) {
    std::fprintf(stderr, "rogue: could not reach %s\n", bootstrap.c_str());
    return 1;
  }
  LogFn quiet = [](Level, const std::string &) {};
  StateServer server("127.0.0.1", 0, run, quiet);
  std::printf("rogue peer %llu\nrogue dht 127.0.0.1:%u\n", static_cast<unsigned long long>(identity.id()),
              unsigned(dht.port()));
  std::fflush(stdout);

  const std::string key = progress_key(run_id);
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  std::map<uint64_t, ProgressRecord> honest;
  Bytes poisoned;
  int64_t claimed = -1;
  std::string said;
  ProgressRecord me;
  me.peer_id = identity.id();
  me.state_host = "127.0.0.1";
  me.state_port = server.port();
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
    for (const auto &[id, r] : honest) {
      line += " " + std::to_string(r.epoch) + "/" + std::to_string(r.sync_epoch);
      epoch = std::max(epoch, r.epoch);
      if (r.sync_epoch >= me.sync_epoch && r.sync_hash != 0) {
        me.sync_epoch = r.sync_epoch;  // the honest hash, claimed as this rogue's own
        me.sync_hash = r.sync_hash;
      }
      me.fingerprint = r.fingerprint;
    }
    if (line != said && !honest.empty()) {
      said = line;
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    if (poisoned.empty() && !honest.empty()) {
      // A real state, from the honest donors (they serve at their next
      // state-averaging epoch).
      std::vector<Donor> donors;
      for (const auto &[id, r] : honest) donors.push_back(Donor{id, r.state_host, r.state_port, r.epoch});
      std::string why;
      auto got = download_state(donors, run, 0, std::chrono::seconds(20), std::chrono::seconds(5), quiet, &why);
      if (got) {
        poisoned = std::move(got->bytes);
        if (!poison(poisoned)) {
          std::fprintf(stderr, "rogue: the state has no stored entry */data/0 to poison\n");
          return 1;
        }
        std::printf("rogue poisoned the state of epoch %lld (%zu bytes)\n", static_cast<long long>(got->epoch),
                    poisoned.size());
        std::fflush(stdout);
      }
    }
    if (!poisoned.empty()) {
      // Always the state of the swarm's next state-averaging epoch, so that
      // a joiner asking for the swarm's epoch takes it.
      const int64_t next = (epoch + every - 1) / every * every;
      if (next != claimed) {
        claimed = next;
        server.publish(claimed, poisoned);
      }
    }
    me.epoch = epoch;
    me.time_ms = wall_ms();
    me.state_port = poisoned.empty() ? 0 : server.port();
    dht.put(key, me.peer_id, encode(run, me, identity), std::chrono::seconds(10), std::chrono::milliseconds(300));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  me.flags = ProgressRecord::kLeft;
  me.time_ms = wall_ms();
  dht.put(key, me.peer_id, encode(run, me, identity), std::chrono::seconds(10), std::chrono::milliseconds(300));
  return 0;
}
