// SPDX-License-Identifier: Apache-2.0
// A short round's top-up by grants (top_up = "grants", top_up_grants.h):
// the member's side. The hub's side is OobHub (oob_hub.cpp).
#include <algorithm>
#include <cmath>
#include <system_error>

#include "peer.h"

namespace loom_collab {
namespace {

// How long one ask may take before the member gives up on the hub and
// trains its share by rate: an ask is one connection and a reply of under
// a hundred bytes, but on a loaded machine each thread on its way waits its
// turn (8 peers on 2 cores: a median of 14.5 ms, a tenth over 45 ms).
constexpr std::chrono::milliseconds kGrantAskTimeout{1000};
// The least a grant is worth, in this member's round trips to the hub; an
// ask goes out ahead once what is left of the grant takes one round trip.
// More spreads the last meeting: at 2 round trips the members waited 90 ms
// a round in asks and 124 ms at the last meeting, at half of one 116 and 89.
constexpr double kGrantMinTrips = 0.5;

// One ask, on whichever thread: the hub's own member asks its ledger.
TopUpGrants::Asked send_ask(const std::shared_ptr<OobHub> &hub, bool own, const std::string &host, uint16_t port,
                            uint64_t run, const GrantAsk &ask, const std::optional<loom_key::SwarmKey> &key) {
  TopUpGrants::Asked out;
  const auto t0 = Clock::now();
  out.grant = own ? hub->grant(ask, &out.why)
                  : fetch_grant(host, port, run, hub->wrap(encode_grant_ask(ask)), kGrantAskTimeout, &out.why, key);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

// The least worth asking for: this member's samples in kGrantMinTrips of its
// round trips (none before the first ask has measured one).
void set_least(GrantAsk *ask, double rate, double round_trip) {
  const double least = std::isfinite(rate) && rate > 0 ? rate * round_trip * kGrantMinTrips : 0.0;
  ask->min_samples = uint64_t(std::min(least, 1e15));
}

}  // namespace

std::optional<TopUpGrants> Peer::grant_asker(const GroupRecord &group, const GroupComm &comm, double deficit,
                                             uint64_t batch, double share, uint64_t fallback_until) const {
  if (group.hub_port == 0 || !hub_ || !(deficit > 0)) return std::nullopt;
  TopUpGrants g;
  g.ask.group_hash = group.group_hash();
  g.ask.size = uint32_t(comm.size());
  g.ask.rank = uint32_t(comm.rank());
  g.ask.deficit = deficit;
  g.ask.batch = std::max<uint64_t>(1, batch);
  g.ask.share = share > 0 && share <= 1 ? share : 1.0 / double(std::max(1, comm.size()));
  g.own = group.leader == id_;
  if (!g.own) {
    g.host = group.hub_host;
    g.port = group.hub_port;
  }
  g.fallback_until = fallback_until;
  return g;
}

void Peer::ask_ahead(TopUpGrants &g, uint64_t until_samples) {
  if (g.own || g.failed || g.given_out || g.ahead.valid()) return;
  const uint64_t now = samples_.load();
  const double rate = rate_.load();
  const double left = until_samples > now ? double(until_samples - now) : 0.0;
  if (!(rate > 0) || left > rate * g.tally.round_trip) return;
  set_least(&g.ask, rate, g.tally.round_trip);
  try {
    g.ahead = std::async(std::launch::async, send_ask, hub_, g.own, g.host, g.port, run_, g.ask, opt_.swarm_key);
    ++g.tally.ahead;
  } catch (const std::system_error &) {
    // No thread to be had: this member asks at the grant's end instead.
  }
}

bool Peer::ask_grant(TopUpGrants &g, uint64_t *until_samples) {
  if (g.failed || g.given_out) return false;
  const auto t0 = Clock::now();
  TopUpGrants::Asked got;
  if (g.ahead.valid()) {
    got = g.ahead.get();  // bounded by the ask's own timeout
  } else {
    set_least(&g.ask, rate_.load(), g.tally.round_trip);
    got = send_ask(hub_, g.own, g.host, g.port, run_, g.ask, opt_.swarm_key);
  }
  const auto waited = Clock::now() - t0;
  g.asking += waited;
  GrantTally &t = g.tally;
  t.waited += waited > std::chrono::milliseconds(1);
  ++t.asks;
  t.round_trip = t.asks == 1 ? got.seconds : 0.7 * t.round_trip + 0.3 * got.seconds;
  const uint64_t now = samples_.load();
  if (!got.grant) {
    // The others go on asking; this member's share by rate bounds what it
    // adds, so the round exceeds the target by at most that share.
    log_limited(Level::warn, "grant",
                "epoch " + std::to_string(epoch_.load()) + ": the group's hub" +
                    (g.own ? std::string() : " at " + g.host + ":" + std::to_string(g.port)) +
                    " gave no grant of the top-up (" + got.why + "); this peer trains its share by rate instead (" +
                    std::to_string(g.fallback_until > now ? g.fallback_until - now : 0) + " samples more)");
    g.failed = true;
    *until_samples = std::max(now, g.fallback_until);
    return *until_samples > now;
  }
  if (got.grant->samples == 0) {
    g.given_out = true;
    return false;
  }
  t.samples += got.grant->samples;
  // From where the last grant ended: a step past it (a short batch) counts towards this one.
  *until_samples = std::min(*until_samples, now) + got.grant->samples;
  return true;
}

void TopUpCarry::add(const TopUpGrants &g) {
  asking += g.asking;
  grants.asks += g.tally.asks;
  grants.ahead += g.tally.ahead;
  grants.waited += g.tally.waited;
  grants.samples += g.tally.samples;
  grants.round_trip = g.tally.round_trip;
}

std::string top_up_text(const TopUpCarry &in, Clock::duration last_meeting, double after_last_ms) {
  if (in.target == 0) return {};
  auto ms = [](Clock::duration d) { return milliseconds_text(d); };
  std::string out;
  const GrantTally &g = in.grants;
  if (g.asks > 0)
    out += ", topped up by " + std::to_string(g.samples) + " samples in " + std::to_string(g.asks) + " grants (" +
           std::to_string(g.ahead) + " asked ahead, " + std::to_string(g.waited) + " waited for, round trips of " +
           number_text(1000 * g.round_trip) + " ms)";
  return out + ", the wait: " + ms(in.first) + " ms at the first meeting, " + ms(in.waited - in.first) +
         " ms at the others before the last, " + ms(in.asking) + " ms asking for grants, " + ms(last_meeting) +
         " ms at the last (of which " + number_text(after_last_ms) + " ms after the last member came)";
}

}  // namespace loom_collab
