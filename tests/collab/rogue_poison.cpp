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
// A training state is in Loom's raw format (core/src/train/state_format.cpp):
// a text header naming each tensor's offset and length, then the bytes.
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

// Negates the float32 values of the first parameter (tensor p0) of a raw
// state (loom-state-2). False when the bytes are not such a state.
bool poison(Bytes &state) {
  if (state.size() < 16 || std::memcmp(state.data(), "LOOMST02", 8) != 0) return false;
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | state[8 + i];
  if (header > state.size() - 16) return false;
  const std::string text(reinterpret_cast<const char *>(state.data() + 16), size_t(header));
  const size_t at = text.find("\ntensor p0 Float ");
  if (at == std::string::npos) return false;
  char shape[256] = {};
  unsigned long long offset = 0, bytes = 0;
  if (std::sscanf(text.c_str() + at, "\ntensor p0 Float %255s %llu %llu", shape, &offset, &bytes) != 3) return false;
  const size_t data = (16 + size_t(header) + 63) / 64 * 64 + size_t(offset);
  if (data > state.size() || bytes > state.size() - data) return false;
  for (size_t i = 3; i < bytes; i += 4) state[data + i] ^= 0x80;  // the sign bit of each little-endian float
  return true;
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
        std::fprintf(stderr, "rogue: the state is not a raw Loom state with a float32 tensor p0 to poison\n");
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
