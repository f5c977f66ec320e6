// SPDX-License-Identifier: Apache-2.0
// A short round's top-up by grants (top_up = "grants", top_up_grants.h):
// the member's side. The hub's side is OobHub (oob_hub.cpp).
#include <algorithm>
#include <cmath>
#include <system_error>
#include <tuple>

#include "peer.h"

namespace loom_collab {
namespace {

// How long one ask may take before the member gives up on the hub and
// meets its group with what it trained (a dead hub refuses the connection
// at once; this bounds one that hangs). An ask is one connection and a
// reply of under a hundred bytes, but on a loaded machine each thread on
// its way waits its turn: 8 peers on 2 cores, a median of 14.5 ms and a
// tenth over 45 ms; 64 peers, a median of 96 ms and a tenth over 630 ms,
// and at 1 s 53 asks of one 40 s run timed out, each member then idle
// until its group met.
constexpr std::chrono::milliseconds kGrantAskTimeout{4000};
// The least a grant is worth, in this member's round trips to the hub. An
// ask goes out ahead once what is left of the grant takes one round trip,
// so a grant of two has its successor back about when it is trained. At
// half of one (session 30) 64 peers on 2 cores, whose asks took 400 ms,
// drew grants of 6 batches and waited 8.5 s of a round asking; at 8 peers
// a least of 2 or of 0.5 made no difference beyond the runs' swing (one
// run each: 22.5 and 21.5% of an epoch waited).
constexpr double kGrantMinTrips = 2.0;

// One ask, on whichever thread, of copies (an ask ahead runs beside the
// training thread): the hub's own member asks its ledger; another sends
// `pushed`, the ask signed and wrapped (pushed_ask).
TopUpGrants::Asked send_ask(const std::shared_ptr<OobHub> &hub, bool own, const std::string &host, uint16_t port,
                            uint64_t run, const GrantAsk &ask, const Bytes &pushed,
                            const std::optional<loom_key::SwarmKey> &key) {
  TopUpGrants::Asked out;
  const auto t0 = Clock::now();
  out.grant = own ? hub->grant(ask, &out.why) : fetch_grant(host, port, run, pushed, kGrantAskTimeout, &out.why, key);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

// What a member sends: its ask signed by it (the hub checks that the
// signer is the member at its rank) and sealed where the swarm is keyed.
// Nothing for the hub's own member.
Bytes pushed_ask(const OobHub &hub, const TopUpGrants &g, uint64_t run, const Identity &me) {
  return g.own ? Bytes{} : hub.wrap(encode_grant_ask(run, g.ask, me));
}

// The least worth asking for: this member's samples in kGrantMinTrips of its
// round trips (none before the first ask has measured one).
void set_least(GrantAsk *ask, double rate, double round_trip) {
  const double least = std::isfinite(rate) && rate > 0 ? rate * round_trip * kGrantMinTrips : 0.0;
  ask->min_samples = uint64_t(std::min(least, 1e15));
}

}  // namespace

std::optional<GrantHub> Peer::grant_hub(const GroupRecord &group, const GroupComm &comm) const {
  if (!hub_) return std::nullopt;
  GrantHub h;
  // A split group's part asks its own hub, its first member that serves:
  // the whole group's leader answered every part's asks, 12 members' at 16
  // peers in groups of 4 and up to 36 at 64. A whole group asks its
  // leader; a part none of whose members serves, too.
  if (const int32_t first = group.of != 0 ? comm.first_server() : -1; first >= 0) {
    h.own = first == comm.rank();
    if (!h.own) std::tie(h.host, h.port) = comm.servers()[size_t(first)];
    return h;
  }
  if (group.hub_port == 0) return std::nullopt;
  h.own = group.leader == id_;
  if (!h.own) {
    h.host = group.hub_host;
    h.port = group.hub_port;
  }
  return h;
}

std::optional<TopUpGrants> Peer::grant_asker(const GroupRecord &group, const GroupComm &comm, double deficit,
                                             uint64_t batch, double share) const {
  const auto hub = grant_hub(group, comm);
  if (!hub || !(deficit > 0)) return std::nullopt;
  TopUpGrants g;
  g.ask.group_hash = group.group_hash();
  g.ask.size = uint32_t(comm.size());
  g.ask.rank = uint32_t(comm.rank());
  g.ask.deficit = deficit;
  g.ask.batch = std::max<uint64_t>(1, batch);
  g.ask.share = share > 0 && share <= 1 ? share : 1.0 / double(std::max(1, comm.size()));
  g.ask.signer = id_;
  g.own = hub->own;
  g.host = hub->host;
  g.port = hub->port;
  return g;
}

void Peer::ask_ahead(TopUpGrants &g, uint64_t until_samples) {
  if (g.own || g.failed || g.given_out || g.ahead.valid()) return;
  const uint64_t now = samples_.load();
  const double rate = rate_.load();
  const double left = until_samples > now ? double(until_samples - now) : 0.0;
  if (!(rate > 0) || left > rate * g.tally.round_trip) return;
  set_least(&g.ask, rate, g.tally.round_trip);
  ++g.ask.seq;
  try {
    // Signed here: the thread sends bytes and touches nothing of this peer's.
    g.ahead = std::async(std::launch::async, send_ask, hub_, g.own, g.host, g.port, run_, g.ask,
                         pushed_ask(*hub_, g, run_, identity_), opt_.swarm_key);
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
    ++g.ask.seq;
    got = send_ask(hub_, g.own, g.host, g.port, run_, g.ask, pushed_ask(*hub_, g, run_, identity_), opt_.swarm_key);
  }
  const auto waited = Clock::now() - t0;
  g.asking += waited;
  GrantTally &t = g.tally;
  t.waited += waited > std::chrono::milliseconds(1);
  ++t.asks;
  t.round_trip = t.asks == 1 ? got.seconds : 0.7 * t.round_trip + 0.3 * got.seconds;
  const uint64_t now = samples_.load();
  if (!got.grant) {
    // The hub may have granted this ask and lost the reply, and the others
    // go on asking: a member that trained its share by rate besides (until
    // session 30) took rounds at 64 peers up to 24,335 samples past their
    // bound when asks timed out. It meets now instead; a meeting short
    // after grants tops up by shares (a round takes grants once).
    log_limited(Level::warn, "grant",
                "epoch " + std::to_string(epoch_.load()) + ": the group's hub" +
                    (g.own ? std::string() : " at " + g.host + ":" + std::to_string(g.port)) +
                    " gave no grant of the top-up (" + got.why +
                    "); this peer meets its group with what it trained, and a short meeting tops up by shares");
    g.failed = true;
    *until_samples = now;
    return false;
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
