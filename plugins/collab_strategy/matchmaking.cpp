// SPDX-License-Identifier: Apache-2.0
// Matchmaking: the peers of a round (epoch, attempt) put their joins under
// the round's join key; the smallest id that joined leads, closes the group
// and puts its record under the group key; the others wait for it. Both
// keys are watched (dht.h), so the round's reads send nothing but a get
// when a watch stays silent or a leader closes on its window.
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "group_split.h"
#include "peer.h"

namespace loom_collab {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(10);
// How long a round key's watch may bring nothing before a get is sent
// (dht.h: pushes are unacknowledged).
constexpr auto kWatchSilence = std::chrono::milliseconds(250);
// How many epochs a peer's record may lag behind its progress and still
// keep a matchmaking leader from closing alone early (matchmake).
constexpr int64_t kLagEpochs = 8;
// How long past its window a leader may take to publish its group (its
// closing get and put, a loaded machine's scheduling, two machines'
// clocks) before its followers take it for gone.
constexpr int64_t kLeaderLateMs = 3000;

}  // namespace

std::optional<GroupRecord> Peer::matchmake(int64_t epoch, uint32_t attempt, Clock::time_point round_deadline,
                                           const std::atomic<bool> *cancel) {
  const bool background = cancel != nullptr;
  auto cancelled = [cancel] { return cancel && cancel->load(); };
  const auto start = Clock::now();
  const auto window = std::chrono::milliseconds(int64_t(opt_.matchmaking_time * 1000));
  const auto close_at = std::min(start + window, round_deadline);
  JoinRecord join{id_, epoch, attempt, wall_ms()};
  kept_.named(&join.kept, &join.kept_size);
  const std::string jkey = join_key(round_space_, epoch, attempt), gkey = group_key(round_space_, epoch, attempt);
  const Bytes join_bytes = encode(run_, join, identity_);
  // A value id of this round's own, and a ttl that outlives the round
  // (records.h says why both).
  const uint64_t value_id = round_value_id(id_, epoch, attempt);
  const auto ttl = round_record_ttl(opt_.averaging_timeout);
  bool joined = false;
  std::set<uint64_t> joiners{id_};
  std::map<uint64_t, int64_t> joined_ms;  // each joiner's join time (its own clock)
  // Each joiner's kept communicator (kept_comm.h), this peer's own included.
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> kept{{id_, {join.kept, join.kept_size}}};
  // With target_group_size, the leader's record lists every peer that joined
  // and each member averages with its own part of it (group_split.h).
  auto mine = [&](const GroupRecord &whole) { return part_of(whole, id_, uint32_t(opt_.target_group_size)); };

  // What this matchmaking read, for the log: the join key's watched values
  // as they changed and the values they held, gets of either key (when a
  // watch looked dead, or to close on every join).
  uint64_t join_reads = 0, join_values = 0, join_gets = 0, group_reads = 0, group_gets = 0;
  auto said = [&](const std::string &as) {
    detail("matchmaking at epoch " + std::to_string(epoch) + " attempt " + std::to_string(attempt) + ": " + as +
           ", read the join key " + std::to_string(join_reads) + " times (" + std::to_string(join_values) +
           " values) and the group key " + std::to_string(group_reads) + " times; gets: " + std::to_string(join_gets) +
           " of the join key, " + std::to_string(group_gets) + " of the group key");
  };

  // The group record this peer closes as leader, over `from`'s members
  // (in order); published when it lists another peer. true: published.
  auto close_group = [&](std::set<uint64_t>::const_iterator from, GroupRecord *g) {
    g->fingerprint = fingerprint_;
    g->leader = id_;  // it signs the record; a leader need not be a member
    g->epoch = epoch;
    g->attempt = attempt;
    g->members.assign(from, joiners.cend());
    g->reuse = kept_for(g->members, kept, uint32_t(opt_.target_group_size));
    // A leader that averages with them is every part's hub (oob_hub.h);
    // one that hands its group over while leaving is none.
    if (server_ && std::binary_search(g->members.begin(), g->members.end(), id_)) {
      g->hub_host = announce_host_;
      g->hub_port = server_->port();
      // Its parts' members, and only they, may ask it for top-up grants.
      if (hub_)
        for (const auto &part : split_group(*g, uint32_t(opt_.target_group_size))) hub_->lead(part);
    }
    const bool others = std::any_of(g->members.begin(), g->members.end(), [&](uint64_t m) { return m != id_; });
    return others &&
           dht_->put(gkey, value_id, encode(run_, *g, identity_), ttl, std::chrono::milliseconds(500),
                     kRoundExpiryGrain);
  };
  // Leaving as the would-be leader (it joined, and no smaller id did): the
  // peers that joined behind it wait for its group record. They get their
  // group without this peer, so that they average now instead of waiting
  // out a follower's window (under local_steps, the round's deadline) and
  // meeting again at the next attempt.
  auto hand_over_group = [&] {
    if (!joined || joiners.size() < 2 || *joiners.begin() != id_) return;
    GroupRecord g;
    said(close_group(std::next(joiners.cbegin()), &g)
             ? "leaving: its group of the " + std::to_string(g.members.size()) + " others is published without it"
             : "leaving: its group of the others could not be published; they will meet again");
  };

  // The group record with the smallest leader that lists this peer.
  auto find_group = [&](const std::vector<Bytes> &raws, bool *excluded) -> std::optional<GroupRecord> {
    std::optional<GroupRecord> best;
    for (const auto &raw : raws) {
      std::string reason;
      auto g = decode_group(run_, raw.data(), raw.size(), &reason);
      if (!g || g->epoch != epoch || g->attempt != attempt || g->fingerprint != fingerprint_) continue;
      if (!std::binary_search(g->members.begin(), g->members.end(), id_)) {
        if (excluded && g->leader < id_) *excluded = true;
        continue;
      }
      if (!best || g->leader < best->leader) best = g;
    }
    return best;
  };

  auto take_joins = [&](const std::vector<Bytes> &raws) {
    for (const auto &raw : raws) {
      ++join_values;
      std::string reason;
      auto j = decode_join(run_, raw.data(), raw.size(), &reason);
      if (j && j->epoch == epoch && j->attempt == attempt) {
        joiners.insert(j->peer_id);
        joined_ms[j->peer_id] = j->time_ms;
        kept[j->peer_id] = {j->kept, j->kept_size};
      }
    }
  };
  // The round's keys are watched (dht.h): reading them sends nothing, where
  // polling every kPoll cost 16 (N + 1) datagrams a read for N values.
  auto joins = dht_->watch(jkey);
  uint64_t joins_seen = 0;
  Clock::time_point joined_at{};
  bool closing_get = false;
  while (true) {
    if (cancelled()) return std::nullopt;
    if (stopping()) {
      hand_over_group();
      return std::nullopt;
    }
    // The parameters stand still while the training thread waits here: a
    // good moment to snapshot for a joiner (never from the prematch thread).
    if (!background) serve_if_wanted();
    if (!joined) {
      joined = dht_->put(jkey, value_id, join_bytes, ttl, std::chrono::milliseconds(300), kRoundExpiryGrain);
      if (joined) joined_at = Clock::now();
    }
    // The watch brings each join as it is put. One that has brought
    // nothing, not even this peer's own join, long after it was stored, is
    // taken for dead (pushes that cannot arrive): the key is then polled.
    std::vector<Bytes> pushed;
    if (joins->news(&joins_seen, &pushed)) {
      ++join_reads;
      take_joins(pushed);
    } else if (joins_seen == 0 && joined && Clock::now() - joined_at >= kWatchSilence) {
      ++join_gets;
      take_joins(dht_->get(jkey, std::chrono::milliseconds(200)));
    }
    // Joined, and a smaller id joined too: this peer is no leader, and
    // only a leader needs the joins. From here it reads the group key
    // alone (one record), so that a round's reads grow with its group at
    // the leader only, not at every member (every member polling every
    // join every 10 ms made a group of N cost N^2 values a poll).
    if (joined && *joiners.begin() != id_) break;
    // Close early once every peer training at this epoch, or a few behind
    // it, has joined. A record lags its peer by up to a refresh, and reads
    // are spaced by the ETA to the target, so after fast rounds a peer at
    // this epoch can still show one 2 or more behind: trusting that, a
    // leader closed with 2 of 8 peers and the other 6 went on without them
    // (their round brought 6 targets). One truly behind loads the state
    // (its record says so) and is not waited for; a stalled one costs the
    // matchmaking window.
    const SwarmView now_view = view();
    const std::vector<uint64_t> expected = now_view.training_near(epoch, kLagEpochs);
    bool all = std::all_of(expected.begin(), expected.end(), [&](uint64_t p) { return joiners.count(p) > 0; });
    // Never close alone early while another peer trains: its record may
    // lag by more than an epoch (fast epochs, reads spaced by the ETA), and
    // two peers that each closed alone stepped alone at every epoch after,
    // in lockstep, each seeing the other behind: a split swarm for good.
    if (all && joiners.size() == 1 && now_view.others_train_near(epoch, kLagEpochs)) all = false;
    // Under sampled progress the view holds a sample of the swarm's records
    // (its size, an estimate of the whole): "every peer seen has joined" is
    // then no proof that every peer has. Close early only once as many
    // joined as the swarm is estimated to hold.
    if (all && now_view.sampled && joiners.size() < now_view.peers) all = false;
    // The last epoch's group averages the parameters the run ends with. A
    // joiner that loaded the state a few epochs before it, whose record the
    // others had not yet read as training, came to attempt 0 after it
    // closed, met its like at attempt 1, and two halves of the swarm ended
    // on different parameters (the churn test in CI). There the leader
    // waits its window for every full peer it knows of, loading or not.
    if (all && is_last_epoch(epoch) &&
        std::any_of(now_view.others.begin(), now_view.others.end(), [&](const ProgressRecord &r) {
          return !(r.flags & ProgressRecord::kClient) && !joiners.count(r.peer_id);
        }))
      all = false;
    if (all) break;
    if (Clock::now() >= close_at) {
      // Under local_steps every peer ends its epoch after as many local
      // steps: one still stepping at this epoch will come, so the group
      // waits for it (up to the round's deadline) rather than leave it to
      // step alone and load the state after (a whole state over a slow link).
      const bool stragglers = opt_.local_updates && opt_.local_steps > 0 &&
                              std::any_of(expected.begin(), expected.end(), [&](uint64_t p) { return !joiners.count(p); });
      if (!stragglers || Clock::now() >= round_deadline - window) {
        // Pushes are unacknowledged: one get before closing on the window,
        // so that a join the watch missed still makes the group.
        if (closing_get) break;
        closing_get = true;
        ++join_gets;
        take_joins(dht_->get(jkey, std::chrono::milliseconds(200)));
        continue;
      }
    }
    joins->wait(joins_seen, kPoll);
  }
  joins.reset();  // a follower needs the joins no more
  const uint64_t leader = *joiners.begin();
  if (leader == id_) {
    // Another leader may have closed this attempt already, one that did not
    // see this peer's join in time: a late join is the smallest id yet. Two
    // groups that share members break both, for each member takes the
    // smaller leader's and the other's parts wait for members that never
    // come (at 64 peers most of the rounds that could not start). So the
    // group published first stands: this peer follows it if it lists this
    // peer, and otherwise leads only those it left out. Only a joiner that
    // joined well before this peer (half a window; joins carry their
    // clocks) can have closed without seeing it, so the group key is read
    // only then: a steady swarm's leader joins with the others and reads
    // nothing more.
    const int64_t half_window_ms = int64_t(opt_.matchmaking_time * 500);
    const bool others_earlier = std::any_of(joined_ms.begin(), joined_ms.end(), [&](const auto &j) {
      return j.first != id_ && j.second + half_window_ms < join.time_ms;
    });
    if (joiners.size() > 1 && others_earlier) {
      ++group_gets;
      std::optional<GroupRecord> listed;
      size_t taken = 0;
      for (const auto &raw : dht_->get(gkey, std::chrono::milliseconds(200))) {
        std::string reason;
        auto g = decode_group(run_, raw.data(), raw.size(), &reason);
        if (!g || g->epoch != epoch || g->attempt != attempt || g->fingerprint != fingerprint_ || g->leader == id_)
          continue;
        if (std::binary_search(g->members.begin(), g->members.end(), id_)) {
          if (!listed || g->leader < listed->leader) listed = g;
          continue;
        }
        for (uint64_t m : g->members) taken += joiners.erase(m);
      }
      if (listed) {
        said("a leader that found another leader's group listing it, and follows it");
        return mine(*listed);
      }
      if (taken)
        detail("matchmaking at epoch " + std::to_string(epoch) + " attempt " + std::to_string(attempt) + ": " +
               std::to_string(taken) + " of its joiners are in groups other leaders closed first: left out");
    }
    said("the leader of " + std::to_string(joiners.size()) + " joiners");
    GroupRecord g;
    close_group(joiners.cbegin(), &g);  // alone, nothing is published
    return mine(g);
  }
  // A follower waits for its leader's record: the leader closes within its
  // window, which began before this peer saw its join; one more second
  // for the record to arrive.
  // (Under local_steps the leader may wait for stragglers up to the round's
  // deadline.)
  const bool stragglers_waited = opt_.local_updates && opt_.local_steps > 0;
  auto wait_until =
      stragglers_waited ? round_deadline : std::min(Clock::now() + window + std::chrono::seconds(1), round_deadline);
  // A leader closes within its window from its join. One whose join is
  // older than that (and kLeaderLateMs) and whose group has not come was
  // killed after it joined: its join stays under the key until its ttl,
  // the smallest id, and every peer that came to this attempt meanwhile
  // waited a window for it (in a 64-peer churn run, rounds found nobody
  // again and again). A follower then reads the group key once more and
  // moves on to the next attempt.
  bool leader_gone = false;
  const int64_t leader_late_after_ms = int64_t(opt_.matchmaking_time * 1000) + kLeaderLateMs;
  if (auto it = joined_ms.find(leader); !stragglers_waited && it != joined_ms.end()) {
    if (wall_ms() - it->second >= leader_late_after_ms) {
      leader_gone = true;
      wait_until = std::min(wait_until, Clock::now() + std::chrono::milliseconds(300));
    }
  }
  // The leader's record comes through a watch (one put before it began
  // comes with the values it starts with); a get, when the leader should
  // have closed by now and nothing came, then every half second.
  auto groups = dht_->watch(gkey);
  uint64_t groups_seen = 0;
  auto next_get = leader_gone ? Clock::now() : std::max(Clock::now(), start + window) + kWatchSilence;
  bool excluded = false;  // a group closed by a smaller leader, without this peer
  while (Clock::now() < wait_until && !cancelled() && !stopping()) {
    if (!background) serve_if_wanted();
    std::optional<GroupRecord> g;
    std::vector<Bytes> pushed;
    if (groups->news(&groups_seen, &pushed)) {
      ++group_reads;
      g = find_group(pushed, &excluded);
    } else if (Clock::now() >= next_get) {
      ++group_gets;
      g = find_group(dht_->get(gkey, std::chrono::milliseconds(200)), &excluded);
      next_get = Clock::now() + std::chrono::milliseconds(500);
    }
    if (g) {
      said("a follower");
      return mine(*g);
    }
    if (excluded) break;
    groups->wait(groups_seen, kPoll);
  }
  if (leader_gone && !excluded) {
    said("a follower whose leader " + std::to_string(leader) + " joined over " + std::to_string(leader_late_after_ms) +
         " ms ago and published no group (gone: the next attempt)");
    return std::nullopt;
  }
  said("a follower that no group listed");
  detail("no group at epoch " + std::to_string(epoch) + " attempt " + std::to_string(attempt) + " included this peer");
  return std::nullopt;
}

uint32_t Peer::first_open_attempt(int64_t epoch, uint32_t from) {
  for (uint32_t attempt = from; attempt < from + 16; ++attempt) {
    bool closed = false;
    for (const auto &raw : dht_->get(group_key(round_space_, epoch, attempt), std::chrono::milliseconds(100))) {
      std::string reason;
      auto g = decode_group(run_, raw.data(), raw.size(), &reason);
      if (g && g->epoch == epoch && g->attempt == attempt && g->fingerprint == fingerprint_) closed = true;
    }
    if (!closed) return attempt;
  }
  return from + 16;
}

}  // namespace loom_collab
