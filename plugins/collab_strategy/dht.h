/* SPDX-License-Identifier: Apache-2.0 */
// One OpenDHT node per peer: discovery and the swarm's shared records.
// OpenDHT types stay inside dht.cpp. Thread-safe: any thread may call.
#ifndef LOOM_COLLAB_DHT_H
#define LOOM_COLLAB_DHT_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "log.h"
#include "records.h"
#include "../common/swarm_key.h"

namespace loom_collab {

struct DhtConfig {
  std::string listen_host = "0.0.0.0";  // IPv4 address to bind (UDP)
  uint16_t port = 0;                    // 0: any free port
  std::vector<std::string> bootstrap;   // "host:port" of initial peers
  // The swarm key: every key's location is keyed and every value sealed
  // (seal.h), so only holders of the key find, read or write the swarm's
  // records. None: an open swarm, readable by anyone who knows the run_id.
  std::optional<loom_key::SwarmKey> key;
  LogFn log;  // also called from OpenDHT's thread (its warnings, at debug)
};

// Splits "host:port" (a non-empty host of hostname or IPv4 characters, a
// port 1-65535); false when text is not that.
bool split_host_port(const std::string &text, std::string *host, uint16_t *port);

// The kind of a swarm key, for counting what a node asks: "progress",
// "join", "group", "oob", "fingerprint", or "other".
std::string dht_key_kind(const std::string &key);

namespace dht_detail {
struct Waiter;  // dht_impl.h
}

class SwarmDht {
 public:
  // Starts the node and contacts the bootstrap peers (without waiting).
  // Throws std::runtime_error naming what is wrong (an address that does not
  // parse, a port in use).
  explicit SwarmDht(DhtConfig config);
  ~SwarmDht();  // stops the node and joins its threads
  SwarmDht(const SwarmDht &) = delete;
  SwarmDht &operator=(const SwarmDht &) = delete;

  uint16_t port() const;  // the UDP port actually bound

  // Waits until the node knows at least one good peer. Returns true at once
  // when it was given no bootstrap peers (the first peer of a swarm).
  bool wait_connected(std::chrono::milliseconds timeout);
  size_t good_nodes() const;
  // Values this node stores for the swarm (its own and others'): for tests
  // and diagnostics.
  size_t stored_values() const;
  // This node's address as the nodes it talked to saw it (the source of
  // its packets), most reported first: behind NAT, the router's, not the
  // address it bound. Empty until some node has answered.
  std::vector<std::pair<std::string, uint16_t>> observed_addresses() const;

  // Pings each other peer's DHT node (host, port) that the routing table
  // does not hold. Peers learn each other's addresses from progress records;
  // introducing them keeps the swarm one network when the node they
  // bootstrapped through leaves (else two peers that only knew each other
  // through it stop seeing each other's records). A name that does not
  // resolve is skipped (the caller tries again later).
  void introduce(const std::vector<std::pair<std::string, uint16_t>> &peers);

  // Stores value under key (hashed with InfoHash::get). value_id names it:
  // a later put of the same (key, value_id) replaces the earlier one. The
  // value expires ttl after the put. Returns false (and logs at debug) when
  // no node accepted it within timeout. A put made while the node knows no
  // peer returns false and is sent as soon as it knows one. The same value
  // put again under (key, value_id) while the earlier put is unconfirmed
  // (up to 5 s) is not sent again: the call waits for that put.
  //
  // expiry_grain > 0 moves the expiry on to the next multiple of the grain
  // (wall clock, whole seconds), so values put within one grain expire
  // together. Every node that holds a key tells each node that ever watched
  // it (OpenDHT 2.4 keeps a remote listener 10 minutes and never cancels
  // it) of each expiry, one message and its reply for each batch of values
  // expiring at once: put a second apart, a round's joins cost one each.
  bool put(const std::string &key, uint64_t value_id, const Bytes &value, std::chrono::seconds ttl,
           std::chrono::milliseconds timeout, std::chrono::seconds expiry_grain = std::chrono::seconds(0));

  // Every live value under key (this node's and the network's), at most one
  // per value_id (the newest), within timeout: partial results on timeout.
  // fresh: a get of its own, ended when the call returns. shared: one get
  // per key runs at a time; a call while one is under way waits for that
  // one (up to timeout) and answers what it has found so far, so polling a
  // key never piles up searches on a busy machine (dht.cpp).
  enum class GetMode { fresh, shared };
  std::vector<Bytes> get(const std::string &key, std::chrono::milliseconds timeout, GetMode mode = GetMode::fresh);
  // Fresh gets of several keys sent at once and answered together, each as
  // get would, within one timeout: a read of several keys costs the time of
  // the slowest, not the sum.
  std::vector<std::vector<Bytes>> get_many(const std::vector<std::string> &keys, std::chrono::milliseconds timeout);
  // A standing read of key (OpenDHT's listen): the nodes that store it send
  // this node the values they hold when the watch begins, then each value
  // put under it after, so reading a watch sends nothing. A poll of a key
  // with N values costs 16 (N + 1) datagrams each time (start_get); a watch
  // costs a listen to 4 nodes (OpenDHT's LISTEN_NODES) and their pushes.
  //
  // A watch delivers each value id once: OpenDHT's listen keeps the first
  // value of an id and takes a later put of it for a refresh, and a node's
  // search keeps that value across listens, so even a watch begun after the
  // replacement may hold the old one (tried). Values that change go under
  // new ids instead (records.h's round_value_id for the round keys).
  //
  // Pushes are UDP and unacknowledged: a caller that must not miss a value
  // reads with get() too, now and then (matchmaking does before it closes
  // a group). While the node knows no peer the watch waits (see put) and
  // starts at the first read after one appears. The watch stops listening
  // when destroyed; it must not outlive this SwarmDht.
  class Watch {
   public:
    ~Watch();
    Watch(const Watch &) = delete;
    Watch &operator=(const Watch &) = delete;
    // The newest live record of each value id pushed so far.
    std::vector<Bytes> values();
    // Those of them pushed after version() was `after`: a reader that keeps
    // what it read decodes each record once (a leader of N joins would
    // otherwise check N signatures at each of N pushes).
    std::vector<Bytes> values_since(uint64_t after);
    // A reader's step: true when records came since *seen (the version it
    // read last), with those records in *out and *seen moved on.
    bool news(uint64_t *seen, std::vector<Bytes> *out);
    // Grows with each pushed record that changed values().
    uint64_t version();
    // Waits until version() > seen, at most timeout; returns version().
    uint64_t wait(uint64_t seen, std::chrono::milliseconds timeout);

   private:
    friend class SwarmDht;
    struct State;
    Watch(SwarmDht *dht, std::string key);
    void start_if_connected();
    SwarmDht *dht_;
    std::string key_;
    std::mutex start_mu_;  // one start at a time (any thread may read a watch)
    std::shared_ptr<State> state_;
  };
  std::unique_ptr<Watch> watch(const std::string &key);
  // Watches this node has started listening with: for tests and diagnostics.
  uint64_t watches_started() const;
  // Requests this node has sent since it started, by kind (OpenDHT's
  // counts): for tests and diagnostics.
  struct Requests {
    uint64_t ping = 0, find = 0, get = 0, listen = 0, put = 0;
  };
  Requests requests_sent();

  // Gets this node has sent into the network (calls that waited for one
  // already under way not counted): for tests and diagnostics.
  uint64_t gets_started() const;
  // What this node began, by kind of key (dht_key_kind), for the log at
  // exit: "progress: 12 gets (480 values), 50 puts, 0 watches; join: ...".
  // A get of N values costs each node asked N + 1 requests (paging), so
  // the values read say which kind the get requests went to.
  std::string ops_by_kind() const;

  // What the node holds in memory now, for the log at exit. OpenDHT keeps
  // a search per key it has read or written for 62 minutes after its last
  // use, and in each search the nodes near the key, those that stopped
  // answering included, until they have been silent for 10 minutes; most
  // of a long-lived peer's growth under churn is these (records.h).
  struct Held {
    size_t searches = 0;
    size_t search_nodes = 0;  // summed over searches: a node counts once per search
    size_t silent_nodes = 0;  // of them, nodes OpenDHT marks expired (not answering)
    size_t stored_values = 0, stored_bytes = 0;  // what others put here
  };
  Held held() const;

 private:
  // expiry_ms: when the value expires, in milliseconds since the Unix epoch.
  bool put_now(const std::string &key, uint64_t value_id, const Bytes &value, int64_t expiry_ms,
               std::chrono::milliseconds timeout);
  void flush_pending();
  void send_put(const std::string &key, uint64_t value_id, const Bytes &value, int64_t expiry_ms,
                const std::shared_ptr<dht_detail::Waiter> &w);
  struct Impl;
  struct Flight;
  static void start_get(Impl *impl, const std::string &key, const Flight &f);
  static std::vector<Bytes> collect(Impl *impl, const std::string &key, const Flight &f, bool ended,
                                    GetMode mode, std::chrono::milliseconds timeout);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom_collab

#endif
