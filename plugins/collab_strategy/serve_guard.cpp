// SPDX-License-Identifier: Apache-2.0
#include "serve_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace loom_collab {

namespace {
const std::string kOthers = "other addresses";  // shares one entry once a table is full
}

const char *to_string(Rejection r) {
  switch (r) {
    case Rejection::idle:
      return "idle";
    case Rejection::slow_request:
      return "slow request";
    case Rejection::garbage:
      return "garbage";
    case Rejection::wrong_request:
      return "wrong run or version";
    case Rejection::rate:
      return "over the request rate";
    case Rejection::busy:
      return "busy";
    case Rejection::stalled:
      return "stalled reading";
    case Rejection::preempted:
      return "preempted as slow";
    case Rejection::no_key:
      return "without the swarm key";
  }
  return "?";
}

std::string address_key(const sockaddr *sa) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(sa)->sin_addr, text, sizeof text);
    return text;
  }
  if (sa->sa_family == AF_INET6) {
    in6_addr a = reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      ::inet_ntop(AF_INET, a.s6_addr + 12, text, sizeof text);
      return text;
    }
    std::memset(a.s6_addr + 8, 0, 8);
    ::inet_ntop(AF_INET6, &a, text, sizeof text);
    return std::string(text) + "/64";
  }
  return "?";
}

ServeGuard::ServeGuard(double per_minute, LogFn log) : per_minute_(per_minute), log_(std::move(log)) {}

ServeGuard::Bucket &ServeGuard::bucket(const std::string &addr, Clock::time_point now) {
  auto refill = [&](Bucket &b) {
    double minutes = std::chrono::duration<double>(now - b.at).count() / 60.0;
    b.tokens = std::min(per_minute_, b.tokens + minutes * per_minute_);
    b.at = now;
  };
  auto it = buckets_.find(addr);
  if (it == buckets_.end() && buckets_.size() >= kMaxAddresses) {
    // A full bucket is the same as none: forget those first.
    for (auto i = buckets_.begin(); i != buckets_.end();) {
      refill(i->second);
      i = i->second.tokens >= per_minute_ && i->first != kOthers ? buckets_.erase(i) : std::next(i);
    }
    if (buckets_.size() >= kMaxAddresses) it = buckets_.emplace(kOthers, Bucket{per_minute_, now}).first;
  }
  if (it == buckets_.end()) it = buckets_.emplace(addr, Bucket{per_minute_, now}).first;
  refill(it->second);
  return it->second;
}

bool ServeGuard::take(const std::string &addr, Clock::time_point now) {
  Bucket &b = bucket(addr, now);
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

void ServeGuard::give_back(const std::string &addr, double fraction_sent, Clock::time_point now) {
  Bucket &b = bucket(addr, now);
  b.tokens = std::min(per_minute_, b.tokens + 1 - std::clamp(fraction_sent, 0.0, 1.0));
}

void ServeGuard::reject(const std::string &addr, Rejection why, const std::string &detail, Clock::time_point now) {
  auto it = reports_.find(addr);
  if (it == reports_.end()) {
    if (reports_.size() >= kMaxAddresses) {
      it = reports_.find(kOthers);
      if (it == reports_.end()) it = reports_.emplace(kOthers, Report{now - kReportEvery, {}, 0}).first;
    } else {
      it = reports_.emplace(addr, Report{now - kReportEvery, {}, 0}).first;
    }
  }
  Report &r = it->second;
  if (r.total == 0 && now - r.last >= kReportEvery) {
    r.last = now;
    if (log_)
      log_(Level::warn, "state server: " + detail + "; further connections turned away from " + it->first +
                            " are counted and reported at most once a minute");
    return;
  }
  ++r.counts[int(why)];
  ++r.total;
}

void ServeGuard::report(const std::string &addr, Report &r, Clock::time_point now) {
  std::string parts;
  for (int k = 0; k < kRejectionKinds; ++k)
    if (r.counts[k] > 0) parts += (parts.empty() ? "" : ", ") + std::to_string(r.counts[k]) + " " + to_string(Rejection(k));
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - r.last).count();
  if (log_)
    log_(Level::warn, "state server: turned away " + std::to_string(r.total) + " more connections from " + addr +
                          " in the last " + std::to_string(secs) + " s (" + parts + ")");
  r = Report{now, {}, 0};
}

void ServeGuard::flush(Clock::time_point now) {
  for (auto it = reports_.begin(); it != reports_.end();) {
    Report &r = it->second;
    if (now - r.last < kReportEvery) {
      ++it;
    } else if (r.total > 0) {
      report(it->first, r, now);
      ++it;
    } else {
      it = reports_.erase(it);  // a quiet minute: the next rejection is logged at once again
    }
  }
}

}  // namespace loom_collab
