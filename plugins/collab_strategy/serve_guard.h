/* SPDX-License-Identifier: Apache-2.0 */
// Per-address bookkeeping of a state server: a token bucket per address for
// the request rate, and rejection counts reported at most once a minute per
// address. Not thread-safe: the server's front thread owns it. Each table
// holds at most kMaxAddresses entries (addresses beyond that share one
// bucket and one report), so a flood from many addresses costs a fixed
// amount of memory.
#ifndef LOOM_COLLAB_SERVE_GUARD_H
#define LOOM_COLLAB_SERVE_GUARD_H

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "log.h"

namespace loom_collab {

// Why a connection was turned away or dropped.
enum class Rejection {
  idle,           // sent nothing before its deadline, or made room for a newer connection
  slow_request,   // sent part of its request, then not the rest in time
  garbage,        // not a state request (bad magic or checksum)
  wrong_request,  // another run's, or a wire version this server does not speak
  rate,           // its address is over serve_requests_per_minute
  busy,           // every transfer slot is held by a transfer still moving
  stalled,        // read nothing of the reply for serve_idle_timeout
  preempted,      // its stalled or slow transfer made room for a new request
  no_key,         // the swarm has a key and this client did not prove it holds it
};
constexpr int kRejectionKinds = 9;
const char *to_string(Rejection r);

// What limits are kept per: an IPv4 address, or an IPv6 address's /64 (one
// host's usual share); "?" for other families.
std::string address_key(const sockaddr *sa);

class ServeGuard {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxAddresses = 4096;
  static constexpr std::chrono::seconds kReportEvery{60};

  // per_minute: requests an address may be served per minute; its bucket
  // holds a minute's worth and refills evenly.
  ServeGuard(double per_minute, LogFn log);

  // Takes a token for one request from addr; false when it has none.
  bool take(const std::string &addr, Clock::time_point now);
  // Gives back 1 - fraction_sent of a token: a request that ended with
  // little of the state sent (not ready, stalled, preempted) cost little, so
  // slow clients sharing an honest joiner's address (NAT, loopback) cannot
  // spend its tokens by being dropped.
  void give_back(const std::string &addr, double fraction_sent, Clock::time_point now);

  // Counts a rejection. The first from an address (or the first after a
  // quiet minute) is logged at once with `detail`; later ones are counted
  // and reported by flush, one line per address per minute.
  void reject(const std::string &addr, Rejection why, const std::string &detail, Clock::time_point now);
  // Logs the counts that are a minute old; forgets quiet addresses.
  void flush(Clock::time_point now);

  size_t tracked() const { return buckets_.size() + reports_.size(); }  // entries held (for tests)

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point at;
  };
  struct Report {
    Clock::time_point last;  // when a line was last logged
    uint64_t counts[kRejectionKinds] = {};
    uint64_t total = 0;
  };
  Bucket &bucket(const std::string &addr, Clock::time_point now);
  void report(const std::string &addr, Report &r, Clock::time_point now);

  double per_minute_;
  LogFn log_;
  std::unordered_map<std::string, Bucket> buckets_;
  std::unordered_map<std::string, Report> reports_;
};

}  // namespace loom_collab

#endif
