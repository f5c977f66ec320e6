// SPDX-License-Identifier: Apache-2.0
// SwarmDht over OpenDHT's DhtRunner (its own thread runs the node; our calls
// queue operations on it and wait on condition variables with deadlines).
//
// Values are of our own ValueType, whose edit policy lets a newer put of the
// same value id replace the stored one (OpenDHT's default type refuses edits
// of unsigned values). Each value carries a small envelope before the record:
//
//   version u8 = 1 | expiry u64 (ms since the Unix epoch) | stamp u64 (µs, grows per process)
//
// In a swarm with a key, the version is 2 and the record that follows is
// sealed (seal.h) with the envelope and the key's location as associated
// data; such a swarm's keys also live at keyed locations. A node stores and
// serves either kind (it may hold another swarm's values); get opens only
// its own kind.
//
// The stamp orders puts of the same id (the edit policy and get keep the
// newest); the expiry lets get drop values whose ttl has passed even where a
// node still holds them. OpenDHT expires a stored value at created + the
// type's expiration, so put backdates `created` by (kMaxTtl - ttl): every node
// then drops the value ttl after the put (OpenDHT sends `created` in whole
// seconds, so a remote copy may go up to a second early). Clocks of peers are
// assumed within a few seconds of each other, as hivemind does.
#include "dht.h"

#include "dht_impl.h"
#include "dht_value.h"
#include "seal.h"
#include "udp_buffer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <opendht/dhtrunner.h>
// OpenDHT has no version macro; its headers tell the two APIs apart. 3.x
// (Debian 13 takes it from sid) logs formatted lines through one
// std::function (logger.h) and keeps a NodeExport's address as a SockAddr
// (node_export.h); 2.4 (Debian 12) has printf-style LogMethods per level and
// a raw sockaddr_storage.
#if __has_include(<opendht/logger.h>)
#include <opendht/logger.h>
#define LOOM_OPENDHT_LINE_LOGGER 1
#else
#include <opendht/log_enable.h>
#define LOOM_OPENDHT_LINE_LOGGER 0
#endif
#if __has_include(<opendht/node_export.h>)
#define LOOM_OPENDHT_NODE_SOCKADDR 1
#else
#define LOOM_OPENDHT_NODE_SOCKADDR 0
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace loom_collab {
namespace {

using namespace std::chrono;
using namespace swarm_value;
using namespace dht_detail;

// The receive buffer asked for the node's UDP socket (the kernel caps it at
// net.core.rmem_max: 4 MiB on these machines, 208 KiB by Linux's default,
// which is also the default buffer). A read of a key with N values brings
// 8 (N + 1) replies at once, 136 at 16 peers, and the kernel charges each
// datagram its whole allocation, not its bytes: with 16 peers on 2 cores,
// 208 KiB lost 0 to 17 datagrams a second, 4 MiB none in two runs
// (bench/swarm_scale.py, README).
constexpr int kDhtReceiveBuffer = 4 << 20;

// A network id of our own, so a Loom node never merges with the public
// OpenDHT network (or another application's) even if bootstrapped into it.
constexpr dht::NetId kNetwork = 0x4c4f4f4d;  // "LOOM"

}  // namespace

bool split_host_port(const std::string &s, std::string *host, uint16_t *port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size() || s.size() - colon - 1 > 5) return false;
  *host = s.substr(0, colon);
  for (char c : *host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-')) return false;
  }
  unsigned long p = 0;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    p = p * 10 + static_cast<unsigned long>(s[i] - '0');
  }
  if (p == 0 || p > 65535) return false;
  *port = static_cast<uint16_t>(p);
  return true;
}

namespace {

#if LOOM_OPENDHT_LINE_LOGGER
// OpenDHT reports routine events (searches without nodes, no IPv6) as errors
// and warnings: they reach us at debug; its own debug stream stays off.
std::shared_ptr<dht::Logger> make_logger(const LogFn &log) {
  return std::make_shared<dht::Logger>([log](dht::log::LogLevel level, std::string &&line) {
    if (level == dht::log::LogLevel::debug) return;
    log(Level::debug, "opendht: " + line);
  });
}
#else
dht::LogMethod log_to(const LogFn &log, Level level) {
  return dht::LogMethod([log, level](char const *format, va_list args) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, format, args);
    log(level, std::string("opendht: ") + buf);
  });
}

// As above: OpenDHT's errors and warnings at debug, its debug stream off.
std::shared_ptr<dht::Logger> make_logger(const LogFn &log) {
  return std::make_shared<dht::Logger>(log_to(log, Level::debug), log_to(log, Level::debug), dht::LogMethod());
}
#endif

dht::SockAddr address_of(const dht::NodeExport &n) {
#if LOOM_OPENDHT_NODE_SOCKADDR
  return n.addr;
#else
  return dht::SockAddr(n.ss, n.sslen);
#endif
}

// A get OpenDHT has not ended after this long is left to end alone (its
// search normally ends within a few seconds of retries), and the next call
// starts another.
constexpr auto kAbandonGet = seconds(5);

}  // namespace

SwarmDht::SwarmDht(DhtConfig config) : impl_(new Impl) {
  impl_->log = config.log;
  if (config.key) impl_->sealer = std::make_unique<Sealer>(*config.key);
  // Validate everything before starting threads, so a bad peer throws cleanly.
  std::vector<std::pair<std::string, uint16_t>> peers;
  for (const auto &b : config.bootstrap) {
    std::string host;
    uint16_t p = 0;
    if (!split_host_port(b, &host, &p)) {
      throw std::runtime_error("bad initial peer '" + b + "': expected host:port, for example 192.0.2.7:31337");
    }
    peers.emplace_back(host, p);
  }
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(config.port);
  if (inet_pton(AF_INET, config.listen_host.c_str(), &sin.sin_addr) != 1) {
    throw std::runtime_error("bad DHT listen address '" + config.listen_host +
                             "': expected an IPv4 address such as 0.0.0.0");
  }
  const std::string where = config.listen_host + ":" + std::to_string(config.port);

  dht::DhtRunner::Config rc;
  rc.dht_config.node_config.network = kNetwork;
  // Hand stored values on to closer nodes as they appear: values put while a
  // node was alone then reach the peers that join later.
  rc.dht_config.node_config.maintain_storage = true;
  // OpenDHT limits requests per source IP; peers behind one NAT, or on one
  // machine, share an IP, and matchmaking polls a few keys many times a
  // second: the default limit dropped requests with four local peers.
  rc.dht_config.node_config.max_peer_req_per_sec = -1;
  rc.dht_config.node_config.max_req_per_sec = -1;
  rc.threaded = true;
  rc.bind4 = dht::SockAddr(reinterpret_cast<const sockaddr *>(&sin), sizeof sin);
  dht::DhtRunner::Context ctx;
  if (config.log) ctx.logger = make_logger(config.log);
  try {
    impl_->runner.run(rc, std::move(ctx));
  } catch (const std::exception &e) {
    throw std::runtime_error("cannot start the DHT node on UDP " + where + ": " + e.what());
  }
  impl_->runner.registerType(swarm_type());
  impl_->port = impl_->runner.getBoundPort(AF_INET);
  if (impl_->port == 0) {
    impl_->runner.join();
    throw std::runtime_error("cannot start the DHT node on UDP " + where + ": no IPv4 socket bound");
  }
  for (const auto &[host, p] : peers) {
    // OpenDHT resolves names on its own thread and retries these peers while
    // the node has no connection, so nothing here blocks on DNS.
    impl_->runner.bootstrap(host, std::to_string(p));
  }
  impl_->has_bootstrap = !peers.empty();
  if (!raise_udp_receive_buffer(impl_->port, kDhtReceiveBuffer))
    impl_->debug("could not raise the receive buffer of the DHT's UDP socket (port " + std::to_string(impl_->port) +
                 ")");
  impl_->debug("DHT node listening on UDP " + config.listen_host + ":" + std::to_string(impl_->port));
}

// No OpenDHT shutdown(): with maintain_storage it hands every value this
// node holds to the key's other nodes, which hold copies already (each put
// goes to 8) and whose owners put them again while they live, and it held
// each exit up to 300 ms. join() closes the socket and the thread. (Sixteen
// peers stopping together, bench/swarm_scale.py, one run each: 58,551
// datagrams in 1.7 s without it, 64,582 and 75,812 in 2.6 s with it; the
// rest is the swarm's reaction to the departures.)
SwarmDht::~SwarmDht() { impl_->runner.join(); }

uint16_t SwarmDht::port() const { return impl_->port; }

size_t SwarmDht::good_nodes() const { return impl_->runner.getNodesStats(AF_INET).good_nodes; }

void SwarmDht::introduce(const std::vector<std::pair<std::string, uint16_t>> &peers) {
  if (peers.empty()) return;
  const auto known = impl_->runner.exportNodes();  // once for the whole list
  for (const auto &[host, port] : peers) {
    std::vector<dht::SockAddr> addrs;
    try {
      addrs = dht::SockAddr::resolve(host, std::to_string(port));
    } catch (const std::exception &) {
      continue;
    }
    for (const auto &a : addrs) {
      if (a.getFamily() != AF_INET) continue;
      if (std::none_of(known.begin(), known.end(),
                       [&](const dht::NodeExport &n) { return address_of(n) == a; })) {
        impl_->debug("DHT: introducing " + a.toString() + ", a peer the routing table lacks");
        impl_->runner.bootstrap(a);
      }
    }
  }
}

size_t SwarmDht::stored_values() const { return impl_->runner.getStoreSize().second; }

std::vector<std::pair<std::string, uint16_t>> SwarmDht::observed_addresses() const {
  std::vector<std::pair<std::string, uint16_t>> out;
  for (const auto &a : impl_->runner.getPublicAddress(AF_INET)) {
    char text[INET_ADDRSTRLEN] = {0};
    const auto *in = reinterpret_cast<const sockaddr_in *>(a.get());
    if (a.getFamily() == AF_INET && ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text))
      out.emplace_back(text, a.getPort());
  }
  return out;
}

bool SwarmDht::wait_connected(std::chrono::milliseconds timeout) {
  if (!impl_->has_bootstrap) return true;
  const auto deadline = steady_clock::now() + timeout;
  for (;;) {
    if (good_nodes() > 0) return true;
    const auto now = steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<steady_clock::duration>(milliseconds(10), deadline - now));
  }
}

uint64_t SwarmDht::gets_started() const { return impl_->gets_started.load(); }

std::string dht_key_kind(const std::string &key) {
  if (key.rfind("loom/", 0) != 0) return "other";
  for (const char *kind : {"join", "group", "oob", "fingerprint"})
    if (key.find("/" + std::string(kind) + "/") != std::string::npos) return kind;
  const std::string progress = "/progress";
  const size_t at = key.find(progress);
  if (at != std::string::npos && (at + progress.size() == key.size() || key[at + progress.size()] == '/'))
    return "progress";
  return "other";
}

std::string SwarmDht::ops_by_kind() const {
  std::lock_guard<std::mutex> lock(impl_->ops_mu);
  std::string out;
  for (const auto &[kind, o] : impl_->ops) {
    if (!out.empty()) out += "; ";
    out += kind + ": " + std::to_string(o.gets) + " gets (" + std::to_string(o.values) + " values), " +
           std::to_string(o.puts) + " puts, " + std::to_string(o.watches) + " watches";
  }
  return out.empty() ? "none" : out;
}

SwarmDht::Held SwarmDht::held() const {
  Held h;
  // OpenDHT says what a search holds only as text: its log of searches
  // lists their ids (with more than 8 it lists nothing else), and one
  // search's log gives a line per node, "<common bits> <node id> <*> [<pending
  // requests><x>]", x marking a node that stopped answering.
  std::vector<dht::InfoHash> ids;
  {
    std::istringstream all(impl_->runner.getSearchesLog(AF_INET));
    std::string line;
    const std::string listed = "[search ", dumped = "Search IPv4 ";
    while (std::getline(all, line)) {
      for (const std::string &head : {listed, dumped})
        if (line.rfind(head, 0) == 0 && line.size() >= head.size() + 40)
          ids.push_back(dht::InfoHash(line.substr(head.size(), 40)));
    }
  }
  h.searches = ids.size();
  for (const auto &id : ids) {
    std::istringstream one(impl_->runner.getSearchLog(id, AF_INET));
    std::string line;
    while (std::getline(one, line)) {
      if (line.size() < 48 || line[3] != ' ' || !std::isxdigit(static_cast<unsigned char>(line[4]))) continue;
      const size_t open = line.find('[', 44), close = line.find(']', 44);
      if (open == std::string::npos || close == std::string::npos || close <= open) continue;
      ++h.search_nodes;
      if (line[close - 1] == 'x') ++h.silent_nodes;
    }
  }
  const auto stored = impl_->runner.getStoreSize();
  h.stored_bytes = stored.first;
  h.stored_values = stored.second;
  return h;
}

// GetMode::shared: at most one get per key is under way; a call while one
// is waits for that one (up to its timeout) and answers what it has found
// so far, instead of sending another search to the same nodes. On a busy
// machine a get outlasts its caller's timeout, and polling with a new get
// each time piles searches and retries onto the nodes that hold the key.
// Only the observer (loom swarm status) reads shared. A peer's reads stay
// fresh: a shared read may answer with what nodes held when the get began,
// and peers decide on records by the millisecond. Matchmaking's keys read
// shared let groups close late (a join seen one get late) and members
// overshoot the target (tests/swarm/samples_per_round_test.cpp over its
// bound in 1 run of 6 alone, and in a full-suite run); progress records
// read shared, it went over in a full-suite run and in 1 of 2 runs beside
// netns.stripes, fresh in neither (1 full-suite run, 2 beside it). The traffic this saves was not shown either: at 32 peers on
// 2 cores, runs swung as much as the change (523-888 datagrams a second).
namespace dht_detail {

Opened keep_newest(HeldValues *held, const dht::Value &v, const Sealer *sealer, const dht::InfoHash &at, int64_t now,
                   uint64_t version) {
  Envelope e;
  if (!parse_envelope(v, &e) || e.expiry_ms <= now) return Opened::skip;
  auto it = held->find(v.id);
  if (it != held->end() && e.stamp <= it->second.stamp) return Opened::skip;
  if (e.sealed != (sealer != nullptr)) return Opened::unopened;
  Bytes record;
  if (!sealer) {
    record.assign(v.data.begin() + kEnvelope, v.data.end());
  } else {
    const auto ad = associated(v.data.data(), at);
    if (!sealer->open(v.data.data() + kEnvelope, v.data.size() - kEnvelope, ad.data(), ad.size(), &record))
      return Opened::unopened;
  }
  (*held)[v.id] = Held{e.stamp, e.expiry_ms, std::move(record), version};
  return Opened::ok;
}

}  // namespace dht_detail

// Sends a get for key into the network; its values arrive in f.found.
//
// What a get costs: OpenDHT (2.4 to 3.7) asks each of the ~8 nodes that
// hold the key for the values' ids, then for each value on its own (its
// pagination): 16 (N + 1) datagrams for N values. At 16 peers a progress
// read is ~270 datagrams, most of a peer's DHT traffic. A select query
// (values kept in the user_type field, which a node returns in one reply)
// would cost 16, but OpenDHT merges a query's answers by field names alone
// (FieldValueIndex::containedIn), so only the first non-empty answer
// arrives: this node's own storage, or one node's, and with 16 nodes 6 of
// them held part of a key's values (tried 2026-12-04). Hence gets.
void SwarmDht::start_get(Impl *impl, const std::string &key, const Flight &f) {
  impl->gets_started.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(impl->ops_mu);
    ++impl->ops_of(key).gets;
  }
  auto found = f.found;
  auto w = f.waiter;
  const dht::InfoHash at = impl->where(key);
  const Sealer *sealer = impl->sealer.get();  // outlives every callback: the destructor joins the runner first
  impl->runner.get(
      at,
      [found, sealer, at](const std::vector<std::shared_ptr<dht::Value>> &values) {
        const int64_t now = now_ms();
        std::lock_guard<std::mutex> lock(found->mu);
        if (found->stop) return false;  // answered (fresh), or replaced by a newer get: end the search
        for (const auto &v : values)
          if (v && keep_newest(&found->newest, *v, sealer, at, now, 0) == Opened::unopened) ++found->unopened;
        return true;
      },
      [w](bool ok, const std::vector<std::shared_ptr<dht::Node>> &) { w->finish(ok); },
      dht::Value::TypeFilter(kTypeId));
}

// What f found so far (ended: its search is over), as get answers it.
std::vector<Bytes> SwarmDht::collect(Impl *impl, const std::string &key, const Flight &f, bool ended, GetMode mode,
                                     std::chrono::milliseconds timeout) {
  if (!ended)
    impl->debug("DHT get under " + key + ": search not finished within " + std::to_string(timeout.count()) +
                 " ms (partial result)");
  std::vector<Bytes> out;
  uint64_t unopened = 0;
  {
    std::lock_guard<std::mutex> lock(f.found->mu);
    out.reserve(f.found->newest.size());
    for (const auto &entry : f.found->newest) out.push_back(entry.second.record);
    if (mode == GetMode::fresh) f.found->stop = true;  // the caller has its answer: end the search
    if (ended || mode == GetMode::fresh) {
      unopened = f.found->unopened;
      f.found->unopened = 0;
    }
  }
  if (unopened) impl->count_unopened(key, unopened);
  {
    std::lock_guard<std::mutex> lock(impl->ops_mu);
    impl->ops_of(key).values += out.size();
  }
  if (ended && mode == GetMode::shared) {
    std::lock_guard<std::mutex> lock(impl->flights_mu);
    auto it = impl->flights.find(key);
    if (it != impl->flights.end() && it->second.found == f.found) impl->flights.erase(it);
  }
  return out;
}

std::vector<Bytes> SwarmDht::get(const std::string &key, std::chrono::milliseconds timeout, GetMode mode) {
  if (good_nodes() == 0) return {};  // alone: see put
  flush_pending();
  Flight f;
  bool start = false;
  if (mode == GetMode::fresh) {
    f = Flight{std::make_shared<Found>(), std::make_shared<Waiter>(), steady_clock::now()};
    start = true;
  } else {
    const auto now = steady_clock::now();
    std::lock_guard<std::mutex> lock(impl_->flights_mu);
    for (auto it = impl_->flights.begin(); it != impl_->flights.end();) {  // ended, or left to end alone
      const bool over = it->second.waiter->finished() || now - it->second.started >= kAbandonGet;
      if (over && it->first != key) {
        std::lock_guard<std::mutex> g(it->second.found->mu);
        it->second.found->stop = true;
        it = impl_->flights.erase(it);
      } else {
        ++it;
      }
    }
    auto it = impl_->flights.find(key);
    if (it != impl_->flights.end() && !it->second.waiter->finished() && now - it->second.started < kAbandonGet) {
      f = it->second;
    } else {
      if (it != impl_->flights.end()) {
        std::lock_guard<std::mutex> g(it->second.found->mu);
        it->second.found->stop = true;
      }
      f = Flight{std::make_shared<Found>(), std::make_shared<Waiter>(), now};
      impl_->flights[key] = f;
      start = true;
    }
  }
  if (start) start_get(impl_.get(), key, f);
  bool ok = false;
  const bool ended = f.waiter->wait(timeout, &ok);
  return collect(impl_.get(), key, f, ended, mode, timeout);
}

std::vector<std::vector<Bytes>> SwarmDht::get_many(const std::vector<std::string> &keys,
                                                   std::chrono::milliseconds timeout) {
  std::vector<std::vector<Bytes>> out(keys.size());
  if (good_nodes() == 0) return out;  // alone: see put
  flush_pending();
  std::vector<Flight> flights;
  for (const auto &key : keys) {
    flights.push_back(Flight{std::make_shared<Found>(), std::make_shared<Waiter>(), steady_clock::now()});
    start_get(impl_.get(), key, flights.back());
  }
  const auto deadline = steady_clock::now() + timeout;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool ok = false;
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now()));
    const bool ended = flights[i].waiter->wait(left, &ok);
    out[i] = collect(impl_.get(), keys[i], flights[i], ended, GetMode::fresh, timeout);
  }
  return out;
}

}  // namespace loom_collab
