// SPDX-License-Identifier: Apache-2.0
// loom_swarm_rogue's ghost-leader mode, for the swarm test of matchmaking:
//
//   loom_swarm_rogue --ghost RUN_ID HOST:PORT SECONDS
//     joins a run's DHT with an id smaller than any honest peer's is likely
//     to be (below 2^56: about 256 key pairs made), and whenever the honest
//     peers' records show a new highest epoch E, puts a join for attempt 0
//     of epoch E + 2 and never closes a group: a leader killed just after
//     it joined, whose join outlives it under the round's key. It publishes
//     no progress record (a killed peer's expires). Prints "rogue peer ID",
//     then "rogue ghost joined epoch N" for each join.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "dht.h"
#include "identity.h"
#include "records.h"
#include "rogue_support.hpp"

using namespace loom_collab;

int ghost_main(const std::string &run_id, const std::string &bootstrap, int seconds) {
  using Clock = std::chrono::steady_clock;
  auto identity = std::make_unique<Identity>();
  while (identity->id() >= (uint64_t(1) << 56)) identity = std::make_unique<Identity>();
  const uint64_t run = run_hash(run_id);
  const auto node = join_dht(bootstrap);
  if (!node) return 1;
  SwarmDht &dht = *node;
  std::printf("rogue peer %llu\n", static_cast<unsigned long long>(identity->id()));
  std::fflush(stdout);
  const std::string key = progress_key(run_id);
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  int64_t joined_up_to = -1;
  while (Clock::now() < until) {
    int64_t epoch = -1;
    uint64_t fingerprint = 0;
    for (const auto &raw : dht.get(key, std::chrono::milliseconds(200))) {
      auto r = decode_progress(run, raw.data(), raw.size(), nullptr);
      if (!r || (r->flags & ProgressRecord::kLeft) || wall_ms() - r->time_ms > 10000) continue;
      if (r->epoch > epoch) {
        epoch = r->epoch;
        fingerprint = r->fingerprint;
      }
    }
    if (epoch >= 0 && epoch + 2 > joined_up_to) {
      const int64_t target = epoch + 2;
      const JoinRecord join{identity->id(), target, 0, wall_ms()};
      // The ttl honest peers give a round's records (averaging_timeout 10 s, the tests' default).
      if (dht.put(join_key(round_space(run_id, fingerprint), target, 0), round_value_id(identity->id(), target, 0),
                  encode(run, join, *identity), round_record_ttl(10.0), std::chrono::milliseconds(300))) {
        joined_up_to = target;
        std::printf("rogue ghost joined epoch %lld\n", static_cast<long long>(target));
        std::fflush(stdout);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}
