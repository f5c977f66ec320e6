// SPDX-License-Identifier: Apache-2.0
// `loom swarm status`: joins a swarm's DHT as an observer (it never trains,
// publishes nothing and serves no state) and shows the swarm live: its
// peers, rate, time to the next epoch, loss and recent rounds; --json for
// scripts, --csv to keep one loss curve per run. Installed with the collab
// plugin (it links the plugin's swarm code); `loom swarm status` runs it.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "dht.h"
#include "dht_value.h"
#include "observer.h"
#include "options.h"
#include "progress_shards.h"
#include "records.h"
#include "state_transfer.h"

namespace {

using namespace loom_collab;
using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// Every peer republishes its record at least once a second: two seconds
// of reads see every live one.
constexpr auto kSettle = std::chrono::milliseconds(2500);
constexpr auto kPoll = std::chrono::milliseconds(250);

struct Args {
  std::string run_id, initial_peers, swarm_key, csv, listen = "0.0.0.0";
  bool json = false, once = false;
  int count = 0;  // snapshots to print; 0: until stopped
  int64_t csv_last = -1;  // the last epoch the CSV file already holds
  double interval = 2, timeout = 10, duration = 0;
};

int usage_error(const std::string &message) {
  std::cerr << "loom swarm status: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  Args a;
  CLI::App app{"Show a collab swarm live, as an observer that never trains: its peers with their epoch, samples per "
               "second and last loss, the swarm's rate and time to the next epoch, and recent rounds."};
  app.name("loom swarm status");
  app.add_option("--run-id", a.run_id, "The swarm's run_id ([strategy.options] run_id)")->required();
  app.add_option("--initial-peers", a.initial_peers,
                 "host:port of one or more peers of the swarm, comma-separated (default: LOOM_INITIAL_PEERS)");
  app.add_option("--swarm-key", a.swarm_key, "The swarm's key file, when it has one (default: LOOM_SWARM_KEY)");
  app.add_flag("--json", a.json, "One JSON object per snapshot, one per line");
  app.add_option("--csv", a.csv, "Append the swarm-wide mean training loss of every finished epoch to this CSV file");
  app.add_flag("--once", a.once, "Print one snapshot and exit (as --count 1)");
  app.add_option("--count", a.count, "Print this many snapshots, then exit")->check(CLI::Range(1, 1 << 30));
  app.add_option("--interval", a.interval, "Seconds between snapshots")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--duration", a.duration, "Stop after this many seconds (0: until Ctrl-C)")->check(CLI::Range(0.0, 1e9));
  app.add_option("--timeout", a.timeout, "Seconds to wait for an initial peer to answer")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--listen", a.listen, "IPv4 address this observer's DHT node binds (UDP)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (a.once) a.count = 1;
  if (!valid_run_id(a.run_id))
    return usage_error("--run-id '" + a.run_id + "' is not a run_id: use 1 to 64 of [A-Za-z0-9_.-]");
  if (a.initial_peers.empty()) {
    const char *env = std::getenv("LOOM_INITIAL_PEERS");
    if (env) a.initial_peers = env;
  }
  const std::vector<std::string> peers = split_list(a.initial_peers);
  if (peers.empty())
    return usage_error("no peer to join through: give --initial-peers HOST:PORT (any peer of the swarm; each logs "
                       "its address as 'listening on HOST:PORT'), or set LOOM_INITIAL_PEERS");
  for (const auto &p : peers) {
    std::string why;
    if (!valid_peer_address(p, &why)) return usage_error("--initial-peers: " + why);
  }
  DhtConfig config;
  config.listen_host = a.listen;
  config.bootstrap = peers;
  if (a.swarm_key.empty()) {
    const char *env = std::getenv("LOOM_SWARM_KEY");
    if (env) a.swarm_key = env;
  }
  if (!a.swarm_key.empty()) {
    loom_key::SwarmKey key;
    std::string why;
    if (!loom_key::read_key(a.swarm_key, &key, &why)) return usage_error("--swarm-key: " + why);
    config.key = key;
  }
  LossCsv csv;
  if (!a.csv.empty()) {
    int64_t last = -1;
    std::string why;
    if (!csv.open(a.csv, &last, &why)) return usage_error("--csv: " + why);
    a.csv_last = last;
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::unique_ptr<SwarmDht> dht;
  try {
    dht = std::make_unique<SwarmDht>(config);
  } catch (const std::exception &e) {
    return usage_error(std::string("cannot start the observer's DHT node: ") + e.what());
  }
  if (!dht->wait_connected(std::chrono::milliseconds(int64_t(a.timeout * 1000)))) {
    std::cerr << "loom swarm status: no initial peer answered within " << a.timeout << " s (" << a.initial_peers
              << "); check the addresses, that those peers run, and that UDP reaches them\n";
    return 1;
  }

  const uint64_t run = run_hash(a.run_id);
  SwarmObserver observer;
  if (!a.csv.empty()) observer.skip_losses_through(a.csv_last);
  std::map<std::string, size_t> rejected;
  const bool tty = !a.json && isatty(STDOUT_FILENO);
  const auto started = Clock::now();
  auto next_print = started + kSettle;
  int printed = 0;
  bool seen_any = false, last_empty = true;
  // A large swarm spreads its records over shards (progress_shards.h). The
  // observer reads every shard of the levels next to the highest one that
  // held records on its last pass (it follows the swarm as it grows or
  // shrinks), and level 0. Until it knows that level, it looks at one shard
  // of each level, which finds any level a swarm writes on.
  int top = -1;
  auto take = [&](const std::vector<Bytes> &raws) {
    size_t n = 0;
    for (const auto &raw : raws) {
      std::string why;
      auto r = decode_progress(run, raw.data(), raw.size(), &why);
      if (!r) {
        const std::string kind = why.substr(0, why.find_first_of("(:0123456789"));
        if (rejected[kind]++ == 0) std::cerr << "loom swarm status: ignored a progress record: " << why << "\n";
        continue;
      }
      observer.merge(*r);
      ++n;
    }
    return n;
  };
  // A key's records from the DHT, then, where those are stale, as one live
  // full peer that writes there holds them: peers whose reads ask each
  // other put their DHT copy only every few seconds (peer_progress.cpp),
  // where their tables are current. Stale: older than the second within
  // which peers reading the DHT republish. The observer pushes nothing.
  uint64_t turn = 0;
  auto read_key = [&](int level, uint32_t shard) {
    size_t n = take(dht->get(progress_shard_key(a.run_id, level, shard), std::chrono::milliseconds(500),
                             SwarmDht::GetMode::shared));
    std::vector<ProgressRecord> full;
    bool stale = false;
    const int64_t now = swarm_value::now_ms();
    for (const auto &r : observer.snapshot(now).peers) {
      if (shard_of(r.peer_id, level) != shard) continue;
      stale = stale || now - r.time_ms > 1500;
      if (serves_progress(r)) full.push_back(r);
    }
    if (stale && !full.empty()) {
      const ProgressRecord &from = full[turn++ % full.size()];
      std::string why;
      if (auto got = fetch_progress(from.state_host, from.state_port, run, level, shard, std::chrono::milliseconds(500),
                                    &why, config.key))
        n += take(*got);
    }
    return n;
  };
  auto read = [&] {
    if (top < 0) {
      for (int level = 0; level <= kMaxShardLevel && !g_stop; ++level)
        if (read_key(level, 0) > 0) top = level;
      if (top < 0) return;
    }
    int highest = -1;
    for (int level = 0; level <= std::min(kMaxShardLevel, top + 1) && !g_stop; ++level) {
      if (level > 0 && level < top - 1) continue;
      size_t found = 0;
      for (uint32_t shard = 0; shard < (uint32_t(1) << level) && !g_stop; ++shard)
        found += read_key(level, shard);
      if (found > 0) highest = level;
    }
    top = highest;
  };
  auto write_csv = [&](std::vector<SwarmObserver::EpochLoss> rows) {
    std::string why;
    if (!csv.append(rows, swarm_value::now_ms(), &why)) {
      std::cerr << "loom swarm status: " << why << "\n";
      return false;
    }
    return true;
  };
  while (!g_stop) {
    read();
    const auto now = Clock::now();
    if (a.duration > 0 && now - started >= std::chrono::milliseconds(int64_t(a.duration * 1000))) break;
    if (now >= next_print) {
      const SwarmSnapshot s = observer.snapshot(swarm_value::now_ms());
      last_empty = s.peers.empty();
      seen_any = seen_any || !last_empty;
      if (a.json) {
        std::cout << snapshot_json(s, a.run_id) << std::endl;
      } else {
        if (tty) std::cout << "\033[H\033[2J";
        std::cout << snapshot_text(s, a.run_id) << std::flush;
      }
      if (!a.csv.empty() && !last_empty && !write_csv(observer.take_losses(s.epoch - 1))) return 1;
      ++printed;
      if (a.count > 0 && printed >= a.count) break;
      next_print = now + std::chrono::milliseconds(int64_t(a.interval * 1000));
    }
    std::this_thread::sleep_for(kPoll);
  }
  if (!a.csv.empty()) {
    const SwarmSnapshot s = observer.snapshot(swarm_value::now_ms());
    // Epochs the swarm has left: the current one is still accumulating.
    if (!write_csv(observer.take_losses(s.peers.empty() ? INT64_MAX : s.epoch))) return 1;
  }
  if (printed > 0 && last_empty) {
    std::cerr << "loom swarm status: no live peer of run '" << a.run_id << "' was seen"
              << (seen_any ? " at the end" : "") << "; check --run-id"
              << (config.key ? "" : ", and give --swarm-key if the swarm has a key (its records are sealed)") << "\n";
    return 1;
  }
  return 0;
}
