/* SPDX-License-Identifier: Apache-2.0 */
// SwarmDht's insides, shared by dht.cpp (puts and gets) and dht_watch.cpp
// (standing reads). Internal: OpenDHT types never leave these files.
#ifndef LOOM_COLLAB_DHT_IMPL_H
#define LOOM_COLLAB_DHT_IMPL_H

#include <opendht/dhtrunner.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dht.h"
#include "dht_value.h"
#include "seal.h"

namespace loom_collab {
namespace dht_detail {

constexpr int64_t kUnopenedLogEveryMs = 60 * 1000;

// A one-shot result that a callback on OpenDHT's thread may deliver after the
// waiter gave up: shared, so a late callback touches live memory.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool ok = false;
  void finish(bool result) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      done = true;
      ok = result;
    }
    cv.notify_all();
  }
  bool finished() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  // True when finished before the deadline; *result is the reported outcome.
  bool wait(std::chrono::milliseconds timeout, bool *result) {
    std::unique_lock<std::mutex> lock(mu);
    const bool finished = cv.wait_for(lock, timeout, [this] { return done; });
    *result = ok;
    return finished;
  }
};

// The newest record of one value id that a get or a watch took.
struct Held {
  uint64_t stamp = 0;      // orders puts of the id (dht.cpp's envelope)
  int64_t expiry_ms = 0;   // the put's ttl, wall clock
  Bytes record;
  uint64_t version = 0;    // a watch's version when it came (0 for gets)
};
using HeldValues = std::map<dht::Value::Id, Held>;

// What one get has found so far: the newest record of each value id.
struct Found {
  std::mutex mu;
  bool stop = false;
  uint64_t unopened = 0;  // values of the other kind, or that the key does not open
  HeldValues newest;
};

enum class Opened { skip, unopened, ok };
// Takes one value, as a get or a watch does, into *held when it is newer
// than what *held has of its id (ok, stored with `version`); skip: another
// type, expired, or not newer; unopened: sealed with another key, sealed
// where the swarm has none, or altered.
Opened keep_newest(HeldValues *held, const dht::Value &v, const Sealer *sealer, const dht::InfoHash &at, int64_t now,
                   uint64_t version);

}  // namespace dht_detail

// A get under way (SwarmDht::get runs at most one per key).
struct SwarmDht::Flight {
  std::shared_ptr<dht_detail::Found> found;
  std::shared_ptr<dht_detail::Waiter> waiter;
  std::chrono::steady_clock::time_point started;
};

struct SwarmDht::Impl {
  LogFn log;
  dht::DhtRunner runner;
  uint16_t port = 0;
  bool has_bootstrap = false;
  // Puts made while the node knows no good peer, sent once it does (see put).
  struct Pending {
    Bytes value;
    int64_t expiry_ms = 0;  // wall clock, as the envelope's
  };
  std::mutex pending_mu;
  std::map<std::pair<std::string, uint64_t>, Pending> pending;
  // Puts sent and not yet confirmed, by (key, value id): a caller that puts
  // the same value again meanwhile waits for that put instead of sending
  // another (see put_now).
  struct PutFlight {
    Bytes value;
    std::shared_ptr<dht_detail::Waiter> waiter;
    std::chrono::steady_clock::time_point started;
  };
  std::mutex put_flights_mu;
  std::map<std::pair<std::string, uint64_t>, PutFlight> put_flights;
  std::unique_ptr<Sealer> sealer;  // with a swarm key
  std::mutex flights_mu;
  std::map<std::string, Flight> flights;  // gets under way, by key
  std::atomic<uint64_t> gets_started{0};
  std::atomic<uint64_t> watches_started{0};
  std::mutex requests_mu;
  Requests requests;  // OpenDHT resets its counts at each read: summed here
  // What this node began, by the kind of key (ops_by_kind): each get of N
  // values costs N + 1 requests per node, so values show where requests go.
  struct Ops {
    uint64_t gets = 0, values = 0, puts = 0, watches = 0;
  };
  std::mutex ops_mu;
  std::map<std::string, Ops> ops;
  Ops &ops_of(const std::string &key) { return ops[dht_key_kind(key)]; }  // under ops_mu
  std::mutex unopened_mu;
  uint64_t unopened = 0;  // values dropped since the last report
  int64_t unopened_logged_ms = 0;

  dht::InfoHash where(const std::string &key) const {
    if (!sealer) return dht::InfoHash::get(key);
    const auto at = sealer->location(key);
    return dht::InfoHash(at.data(), at.size());
  }
  // Values this swarm's key does not open: said at most once a minute.
  void count_unopened(const std::string &key, uint64_t n) {
    std::lock_guard<std::mutex> lock(unopened_mu);
    unopened += n;
    const int64_t now = swarm_value::now_ms();
    if (unopened == 0 || now - unopened_logged_ms < dht_detail::kUnopenedLogEveryMs) return;
    if (log)
      log(Level::warn, "dropped " + std::to_string(unopened) + " DHT value(s) (the latest under " + key +
                           ") that this swarm's key does not open: a peer with another key or none, or an altered "
                           "value");
    unopened = 0;
    unopened_logged_ms = now;
  }

  void debug(const std::string &m) const {
    if (log) log(Level::debug, m);
  }
};

}  // namespace loom_collab

#endif
