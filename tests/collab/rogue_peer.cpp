// A misbehaving swarm member for the bad-input tests: it joins a run's DHT
// and publishes, under the run's progress key, a record of another run, a
// truncated record, a record with a flipped bit and plain garbage, again and
// again until killed or until its time is up.
//   loom_swarm_rogue RUN_ID HOST:PORT SECONDS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dht.h"
#include "records.h"

using namespace loom_collab;

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s RUN_ID HOST:PORT SECONDS\n", argv[0]);
    return 2;
  }
  const std::string run_id = argv[1];
  DhtConfig config;
  config.listen_host = "127.0.0.1";
  config.bootstrap = {argv[2]};
  SwarmDht dht(config);
  if (!dht.wait_connected(std::chrono::seconds(10))) {
    std::fprintf(stderr, "rogue: could not reach %s\n", argv[2]);
    return 1;
  }
  ProgressRecord r;
  r.peer_id = 0xBADBADBADull;
  r.epoch = 5;
  r.samples = 100;
  r.samples_per_second = 10;
  r.state_host = "127.0.0.1";
  r.state_port = 9;
  const std::string key = progress_key(run_id);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[3]));
  while (std::chrono::steady_clock::now() < until) {
    r.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    Bytes other = encode(run_hash(run_id + "-another-run"), r);
    Bytes good = encode(run_hash(run_id), r);
    Bytes truncated(good.begin(), good.begin() + long(good.size() / 2));
    Bytes flipped = good;
    flipped[flipped.size() / 2] ^= 0x10;
    Bytes garbage = {'n', 'o', 't', ' ', 'a', ' ', 'r', 'e', 'c', 'o', 'r', 'd'};
    uint64_t id = 0xBAD000;
    for (const Bytes *b : {&other, &truncated, &flipped, &garbage})
      dht.put(key, ++id, *b, std::chrono::seconds(10), std::chrono::milliseconds(500));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return 0;
}
