// SPDX-License-Identifier: Apache-2.0
// The swarm bookkeeping (tracker.h): what a peer concludes from the progress
// records it read: global epoch, samples towards the target, live peers,
// which of them to wait for, and donors in order of preference.
#include <gtest/gtest.h>

#include <algorithm>

#include "tracker.h"

namespace loom_collab {
namespace {

constexpr int64_t kNow = 1'000'000;
constexpr uint64_t kMe = 1;

ProgressRecord record(uint64_t id, int64_t epoch, uint64_t samples, double rate, int64_t age_ms = 0,
                      uint32_t flags = 0) {
  ProgressRecord r;
  r.peer_id = id;
  r.epoch = epoch;
  r.samples = samples;
  r.samples_per_second = rate;
  r.time_ms = kNow - age_ms;
  r.flags = flags;
  r.state_host = "127.0.0.1";
  r.state_port = uint16_t(1000 + id);
  return r;
}

TEST(Tracker, GlobalEpochIsTheHighestLivePeersAndSamplesAreCountedThere) {
  Tracker t(5000);
  t.merge(record(2, 7, 100, 0));
  t.merge(record(3, 7, 50, 0));
  t.merge(record(4, 6, 999, 0));  // behind: not counted at epoch 7 (this peer is at 6, no epoch start)
  SwarmView v = t.view(kMe, 6, 10, 0, kNow);
  EXPECT_EQ(v.global_epoch, 7);
  EXPECT_EQ(v.samples, 150u);  // this peer's 10 are at epoch 6
  EXPECT_EQ(v.peers, 4u);
}

TEST(Tracker, AReplayedOlderRecordIsRefusedAndCannotUndoAGoodbye) {
  Tracker t(5000);
  const ProgressRecord old = record(2, 7, 100, 0, 3000);
  EXPECT_TRUE(t.merge(old));
  EXPECT_TRUE(t.merge(record(2, 7, 10, 0, 1000, ProgressRecord::kLeft)));  // its goodbye
  EXPECT_EQ(t.view(kMe, 7, 0, 0, kNow).peers, 1u);
  EXPECT_FALSE(t.merge(old));  // replayed: the peer stays gone
  EXPECT_EQ(t.view(kMe, 7, 0, 0, kNow).peers, 1u);
  EXPECT_EQ(t.newest(2), kNow - 1000);
  EXPECT_EQ(t.newest(99), 0);
  EXPECT_TRUE(t.merge(record(2, 8, 0, 0, 0)));  // what it says next counts again
  EXPECT_EQ(t.view(kMe, 8, 0, 0, kNow).peers, 2u);
}

// What frees a member waiting for another in a round (GroupComm::set_left):
// the other's newest record is its goodbye, stamped since the group formed.
TEST(Tracker, LeftSinceIsTheNewestRecordsGoodbyeStampedSinceTheTimeGiven) {
  Tracker t(5000);
  EXPECT_FALSE(t.left_since(2, 0));  // never heard of
  t.merge(record(2, 7, 100, 0, 3000));
  EXPECT_FALSE(t.left_since(2, 0));  // alive
  t.merge(record(2, 7, 100, 0, 1000, ProgressRecord::kLeft));
  EXPECT_TRUE(t.left_since(2, kNow - 1000));
  EXPECT_TRUE(t.left_since(2, kNow - 5000));
  EXPECT_FALSE(t.left_since(2, kNow - 999));  // a goodbye from before the time given: another group's
  t.merge(record(2, 8, 0, 0, 0));             // back, with a newer record
  EXPECT_FALSE(t.left_since(2, 0));
}

ProgressRecord synced(uint64_t id, int64_t sync_epoch, uint64_t hash, int64_t age_ms = 0) {
  ProgressRecord r = record(id, sync_epoch, 0, 1, age_ms);
  r.sync_epoch = sync_epoch;
  r.sync_hash = hash;
  return r;
}

TEST(Tracker, SyncVotesCountTheOtherPeersNeverTheDonor) {
  Tracker t(5000);
  t.merge(synced(2, 5, 0xAAA, 30));
  t.merge(synced(3, 5, 0xAAA, 20));
  t.merge(synced(4, 5, 0xBAD, 10));
  SyncVotes v = t.sync_votes(5, 4, kNow);  // donor 4: its own vote does not count
  EXPECT_EQ(v.count(0xAAA), 2u);
  EXPECT_EQ(v.count(0xBAD), 0u);
  EXPECT_EQ(v.others, 2u);
  EXPECT_EQ(v.others_reached, 2u);
  ASSERT_TRUE(v.majority());
  EXPECT_EQ(*v.majority(), 0xAAAu);
  // A peer that claims an epoch the others have not reached.
  t.merge(synced(4, 10, 0xBAD, 5));
  v = t.sync_votes(10, 4, kNow);
  EXPECT_TRUE(v.votes.empty());
  EXPECT_EQ(v.others_reached, 0u);
  // The others reach it; epoch 5 is still remembered.
  t.merge(synced(2, 10, 0xCCC, 4));
  t.merge(synced(3, 10, 0xCCC, 3));
  EXPECT_EQ(*t.sync_votes(10, 4, kNow).majority(), 0xCCCu);
  EXPECT_EQ(*t.sync_votes(5, 4, kNow).majority(), 0xAAAu);
}

TEST(Tracker, RecordsPastTheLiveHorizonVouchForTheirHashesButDoNotVote) {
  Tracker t(5000);
  t.merge(synced(2, 5, 0xAAA, 8000));  // the donor's group-mate, its record 8 s old
  t.merge(synced(3, 5, 0xCCC, 100));   // another group's, live
  t.merge(synced(4, 5, 0xAAA, 100));   // the donor
  ProgressRecord keeper = synced(5, 5, 0xAAA, 9000);
  keeper.flags = ProgressRecord::kCheckpointer;  // trains nothing: vouches for nothing
  t.merge(keeper);
  const SyncVotes v = t.sync_votes(5, 4, kNow);
  EXPECT_EQ(v.count(0xAAA), 0u);  // no live record besides the donor's published it
  EXPECT_EQ(v.others, 1u);
  ASSERT_EQ(v.vouchers.count(0xAAA), 1u);
  EXPECT_EQ(v.vouchers.at(0xAAA), 1u);  // peer 2 only: not the donor, not the checkpointer
  EXPECT_EQ(v.vouchers.at(0xCCC), 1u);
}

TEST(Tracker, HeldCountsOtherPeersRecordsAndTheYoungestAgeLiveOrNot) {
  Tracker t(5000);
  EXPECT_EQ(t.held(kMe, kNow), std::make_pair(size_t(0), int64_t(-1)));
  t.merge(record(kMe, 3, 0, 0, 0));  // this peer's own: not counted
  t.merge(record(2, 3, 0, 0, 12000));
  t.merge(record(3, 3, 0, 0, 7000));
  t.merge(record(4, 3, 0, 0, 100, ProgressRecord::kLeft));  // a goodbye
  EXPECT_EQ(t.held(kMe, kNow), std::make_pair(size_t(2), int64_t(7000)));
  // What a view with no live record pulls tables from: every record but goodbyes, however old.
  EXPECT_TRUE(t.live_records(kNow).size() == 1);  // this peer's own, 0 ms old
  std::vector<uint64_t> ids;
  for (const auto& r : t.live_records(kNow, Tracker::kAnyAge)) ids.push_back(r.peer_id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{kMe, 2, 3}));
}

TEST(Tracker, ARecordsEarlierSyncPointsVoteForEpochsThisTrackerNeverSawAsNewest) {
  // The swarm passed sync points 10 and 15 between two reads of peer 2's
  // record: its record at 20 still vouches for them.
  Tracker t(5000);
  t.merge(synced(2, 5, 0x555, 30));
  ProgressRecord later = synced(2, 20, 0x2020, 10);
  later.earlier_syncs = {{15, 0x1515}, {10, 0x1010}};
  t.merge(later);
  t.merge(synced(3, 20, 0x2020, 5));  // peer 3 (the donor below) says nothing of 15
  for (const auto &[epoch, hash] : std::vector<std::pair<int64_t, uint64_t>>{{5, 0x555}, {10, 0x1010}, {15, 0x1515}}) {
    const SyncVotes v = t.sync_votes(epoch, 3, kNow);
    EXPECT_EQ(v.others, 1u) << epoch;
    EXPECT_EQ(v.majority(), std::optional<uint64_t>(hash)) << epoch;
  }
}

TEST(Tracker, MajorityNeedsMoreThanHalfOfTheOthersAndALeaderNoTie) {
  Tracker t(5000);
  t.merge(synced(2, 5, 0xAAA));
  t.merge(synced(3, 5, 0xBBB));
  t.merge(synced(4, 5, 0xBBB));
  t.merge(synced(5, 5, 0xCCC));
  SyncVotes v = t.sync_votes(5, 9, kNow);  // donor 9 is none of them
  EXPECT_FALSE(v.majority());               // 2 of 4
  ASSERT_TRUE(v.leader());
  EXPECT_EQ(*v.leader(), 0xBBBu);
  v = t.sync_votes(5, 4, kNow);  // donor 4: 1, 1, 1 of 3
  EXPECT_FALSE(v.majority());
  EXPECT_FALSE(v.leader());
}

TEST(Tracker, DeadLoadingAndUnhealthyPeersDoNotVote) {
  Tracker t(5000);
  t.merge(synced(2, 5, 0xAAA, 9000));
  ProgressRecord loading = synced(3, 5, 0xAAA);
  loading.flags = ProgressRecord::kLoading;
  t.merge(loading);
  ProgressRecord sick = synced(5, 5, 0xAAA);
  sick.flags = ProgressRecord::kUnhealthy;
  t.merge(sick);
  t.merge(record(4, 5, 0, 1));  // publishes no hash
  SyncVotes v = t.sync_votes(5, 0, kNow);
  EXPECT_EQ(v.others, 0u);
  EXPECT_TRUE(v.votes.empty());
}

TEST(Tracker, DonorsWithinOneStateAveragingPeriodAreEqualSoTheIdleComeFirst) {
  Tracker t(5000);
  t.merge(record(2, 23, 0, 1, 0, ProgressRecord::kServing));
  t.merge(record(3, 21, 0, 1));
  t.merge(record(4, 19, 0, 1));
  // Per epoch: 2 (23), then 3 (21), then 4.
  auto d = t.donors(kMe, 0, kNow);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].peer_id, 2u);
  EXPECT_EQ(d[1].peer_id, 3u);
  // In periods of 10: 23 and 21 both serve epoch 30's state; the idle 3 first.
  d = t.donors(kMe, 0, kNow, 10);
  EXPECT_EQ(d[0].peer_id, 3u);
  EXPECT_EQ(d[1].peer_id, 2u);
  EXPECT_EQ(d[2].peer_id, 4u);
}

TEST(Tracker, DonorsThatHoldTheSyncPointAskedForComeFirst) {
  // Asked for sync point 20 (a slow swarm's catch-up, plan_resync): 2 is
  // ahead but skipped 20 (its last is 10), 4 named no sync point at all; 3
  // holds 20 and is asked first, though serving.
  Tracker t(5000);
  auto with_sync = [](ProgressRecord r, int64_t epoch) {
    r.sync_epoch = epoch;
    r.sync_hash = 0x1234;
    return r;
  };
  t.merge(with_sync(record(2, 29, 0, 1), 10));
  t.merge(with_sync(record(3, 22, 0, 1, 0, ProgressRecord::kServing), 20));
  t.merge(record(4, 28, 0, 1));
  auto d = t.donors(kMe, 20, kNow, 10);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].peer_id, 3u);
  // Without periods (nothing is checked), sync points do not count.
  d = t.donors(kMe, 20, kNow);
  EXPECT_EQ(d[0].peer_id, 2u);
}

TEST(Tracker, EpochSecondsByLifetimesIsTheLongestLifeOverEpoch) {
  // The founder: 200 s for 10 epochs. A joiner that loaded epoch 9 five
  // seconds ago: 0.5 s an epoch. The longest, 20 s, is the estimate.
  auto lived = [](uint64_t id, int64_t epoch, int64_t seconds) {
    ProgressRecord r = record(id, epoch, 0, 1);
    r.since_ms = kNow - seconds * 1000;
    return r;
  };
  EXPECT_DOUBLE_EQ(epoch_seconds_by_lifetimes({lived(2, 10, 200), lived(3, 10, 5)}), 20.0);
  // Nothing to tell: epoch 0, or no start time.
  ProgressRecord unknown = record(4, 7, 0, 1);
  EXPECT_DOUBLE_EQ(epoch_seconds_by_lifetimes({lived(2, 0, 200), unknown}), 0.0);
  EXPECT_DOUBLE_EQ(epoch_seconds_by_lifetimes({}), 0.0);
}

TEST(Tracker, RecordsAreExtrapolatedByTheirRateForAtMostOneSecond) {
  Tracker t(5000);
  t.merge(record(2, 3, 100, 50, /*age_ms=*/500));
  EXPECT_EQ(t.view(kMe, 3, 0, 0, kNow).samples, 125u);
  Tracker old(5000);
  old.merge(record(2, 3, 100, 50, /*age_ms=*/4000));
  EXPECT_EQ(old.view(kMe, 3, 0, 0, kNow).samples, 150u);  // one second's worth, not four
}

TEST(Tracker, StaleRecordsAndGoodbyesAreNotPeers) {
  Tracker t(5000);
  t.merge(record(2, 9, 0, 0, /*age_ms=*/6000));
  t.merge(record(3, 9, 0, 0, 0, ProgressRecord::kLeft));
  SwarmView v = t.view(kMe, 4, 0, 0, kNow);
  EXPECT_EQ(v.peers, 1u);
  EXPECT_EQ(v.global_epoch, 4);
  EXPECT_TRUE(t.donors(kMe, 0, kNow).empty());
}

TEST(Tracker, RecentPeersCountRecordsPastTheLiveHorizonButNotGoodbyesOrCheckpointers) {
  Tracker t(5000);
  t.merge(record(2, 0, 0, 0, /*age_ms=*/6000));   // not live, but recent
  t.merge(record(3, 0, 0, 0, /*age_ms=*/11000));  // past the DHT's expiry
  t.merge(record(4, 0, 0, 0, 0, ProgressRecord::kLeft));
  t.merge(record(5, 0, 0, 0, 0, ProgressRecord::kCheckpointer));
  t.merge(record(6, 0, 0, 0, /*age_ms=*/100));
  t.merge(record(kMe, 0, 0, 0, 0));
  EXPECT_EQ(t.view(kMe, 0, 0, 0, kNow).peers, 2u);  // this one and 6
  EXPECT_EQ(t.recent_peers(kMe, kNow, 10000), 2u);  // 2 and 6
  EXPECT_EQ(t.recent_peers(kMe, kNow, 5000), 1u);
}

TEST(Tracker, AnOlderCopyNeverReplacesANewerRecord) {
  Tracker t(5000);
  t.merge(record(2, 5, 0, 0, /*age_ms=*/100));
  t.merge(record(2, 4, 0, 0, /*age_ms=*/900));
  EXPECT_EQ(t.view(kMe, 0, 0, 0, kNow).global_epoch, 5);
}

TEST(Tracker, LoadingPeersNeitherSetTheEpochNorDonate) {
  Tracker t(5000);
  t.merge(record(2, 50, 0, 0, 0, ProgressRecord::kLoading));
  SwarmView v = t.view(kMe, 3, 0, 0, kNow);
  EXPECT_EQ(v.global_epoch, 3);
  EXPECT_TRUE(v.training_at(50).empty());
  EXPECT_TRUE(t.donors(kMe, 0, kNow).empty());
}

TEST(Tracker, OnlyPeersThatAccumulateAreWorthWaitingFor) {
  Tracker t(5000);
  t.merge(record(2, 8, 0, 120.0));  // just stepped: no samples yet, a rate
  t.merge(record(3, 8, 0, 0.0));    // publishes, never trains
  t.merge(record(4, 8, 32, 0.0));   // its first window: samples, no rate yet
  SwarmView v = t.view(kMe, 8, 0, 0, kNow);
  EXPECT_EQ(v.training_at(8).size(), 3u);
  EXPECT_EQ(v.accumulating_at(8), (std::vector<uint64_t>{2, 4}));
  EXPECT_TRUE(v.accumulating_at(7).empty());
}

// What keeps a matchmaking leader from closing alone early (round.cpp): a
// peer that trains, even if its record lags some epochs behind.
TEST(Tracker, OthersTrainNearCountsALaggingRecordButNotALoadingUnhealthyClientOrFarBehindPeer) {
  Tracker t(5000);
  t.merge(record(2, 90, 0, 100.0));  // 10 behind epoch 100
  SwarmView v = t.view(kMe, 100, 0, 0, kNow);
  EXPECT_FALSE(v.others_train_near(100, 8));
  EXPECT_TRUE(v.others_train_near(100, 10));
  t.merge(record(3, 95, 0, 100.0, 0, ProgressRecord::kLoading));
  t.merge(record(4, 96, 0, 100.0, 0, ProgressRecord::kUnhealthy));
  t.merge(record(5, 97, 0, 100.0, 0, ProgressRecord::kClient));
  EXPECT_FALSE(t.view(kMe, 100, 0, 0, kNow).others_train_near(100, 8));
  t.merge(record(6, 94, 0, 100.0));  // 6 behind: its record may lag that much
  EXPECT_TRUE(t.view(kMe, 100, 0, 0, kNow).others_train_near(100, 8));
  Tracker ahead(5000);
  ahead.merge(record(2, 120, 0, 100.0));  // ahead: this peer will follow it
  EXPECT_TRUE(ahead.view(kMe, 100, 0, 0, kNow).others_train_near(100, 8));
}

// Whom a matchmaking leader waits for before closing early (round.cpp).
TEST(Tracker, TrainingNearListsLaggingRecordsButNotPeersAheadFarBehindOrAway) {
  Tracker t(5000);
  t.merge(record(2, 100, 64, 100.0));
  t.merge(record(3, 97, 0, 100.0));   // 3 behind: a record that has not caught up
  t.merge(record(4, 91, 0, 100.0));   // 9 behind
  t.merge(record(5, 101, 0, 100.0));  // ahead: it joins another epoch's key
  t.merge(record(6, 99, 0, 100.0, 0, ProgressRecord::kLoading));
  t.merge(record(7, 99, 0, 100.0, 0, ProgressRecord::kClient));
  SwarmView v = t.view(kMe, 100, 0, 0, kNow);
  auto near = v.training_near(100, 8);
  std::sort(near.begin(), near.end());
  EXPECT_EQ(near, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(v.training_near(100, 0), (std::vector<uint64_t>{2}));
}

TEST(Tracker, DonorsAreTheHighestEpochFirstThenIdleOnesAndNeverBehindMinEpoch) {
  Tracker t(5000);
  t.merge(record(2, 10, 0, 0, 0, ProgressRecord::kServing));
  t.merge(record(3, 10, 0, 0));
  t.merge(record(4, 12, 0, 0, 0, ProgressRecord::kServing));
  t.merge(record(5, 9, 0, 0));
  auto d = t.donors(kMe, 10, kNow);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].peer_id, 4u);  // highest epoch, though busy
  EXPECT_EQ(d[1].peer_id, 3u);  // idle before busy at the same epoch
  EXPECT_EQ(d[2].peer_id, 2u);
  EXPECT_EQ(d[1].port, 1003);
}

TEST(Tracker, ReadsAreAsFrequentAsTheTargetIsNear) {
  SwarmView v;
  v.rate = 1000;  // samples a second
  v.samples = 0;
  EXPECT_EQ(read_interval_ms(v, 10000), kMaxReadIntervalMs);  // 10 s away: at the cap
  v.samples = 9200;                                            // 0.8 s away: an eighth of it
  EXPECT_EQ(read_interval_ms(v, 10000), 100);
  v.samples = 9990;  // 10 ms away: at the floor
  EXPECT_EQ(read_interval_ms(v, 10000), kMinReadIntervalMs);
  v.samples = 10000;  // reached, or passed: the peer enters a round; its next epoch reads at once
  EXPECT_EQ(read_interval_ms(v, 10000), kReachedReadIntervalMs);
  v.samples = 20000;
  EXPECT_EQ(read_interval_ms(v, 10000), kReachedReadIntervalMs);
  v.samples = 0;
  v.rate = 0;  // nobody accumulates (waiting for min_peers): by the swarm's size
  v.peers = 1;
  EXPECT_EQ(read_interval_ms(v, 10000), kMinIdleReadIntervalMs);
  v.peers = 3;
  EXPECT_EQ(read_interval_ms(v, 10000), 3 * kIdleReadMsPerPeer);
  v.peers = 64;
  EXPECT_EQ(read_interval_ms(v, 10000), kMaxReadIntervalMs);
  v.samples = 10000;  // but a reached target still enters a round
  EXPECT_EQ(read_interval_ms(v, 10000), kReachedReadIntervalMs);
}

// A peer behind a slow swarm loads the last sync point and follows; near
// the next one (or with no checked states) it asks for the swarm's epoch.
TEST(Tracker, ACatchUpLoadsTheLastSyncPointWhenTheNextIsFarAndFollows) {
  // Epochs of 35 s, a sync point every 5, the swarm at 8: the next (10) is
  // 70 s away, past half of a 60 s load. Epoch 5's state, then epoch 8.
  ResyncPlan p = plan_resync(3, 8, 5, 35.0, 60.0);
  EXPECT_EQ(p.load_epoch, 5);
  EXPECT_EQ(p.follow_to, 8);
  // Past the last sync point already: nothing to load, follow.
  p = plan_resync(6, 8, 5, 35.0, 60.0);
  EXPECT_EQ(p.load_epoch, -1);
  EXPECT_EQ(p.follow_to, 8);
  // 10 s of compute an epoch (the rate's) counts twice: 40 s to epoch 10.
  p = plan_resync(3, 8, 5, 10.0, 60.0);
  EXPECT_EQ(p.load_epoch, 5);
  // A rate not known yet counts as far.
  p = plan_resync(3, 8, 5, 0.0, 60.0);
  EXPECT_EQ(p.load_epoch, 5);
  // Epochs of 50 ms: the next sync point comes within the load; as before.
  p = plan_resync(3, 8, 5, 0.05, 60.0);
  EXPECT_EQ(p.load_epoch, 8);
  EXPECT_EQ(p.follow_to, -1);
  // The swarm at a sync point, or no checked states: its epoch.
  p = plan_resync(3, 10, 5, 35.0, 60.0);
  EXPECT_EQ(p.load_epoch, 10);
  EXPECT_EQ(p.follow_to, -1);
  p = plan_resync(3, 8, 0, 35.0, 60.0);
  EXPECT_EQ(p.load_epoch, 8);
  EXPECT_EQ(p.follow_to, -1);
}

TEST(Tracker, ARecordCountsInTheSwarmsSizeWhileTheDhtKeepsItAndInTheSampleWhileLive) {
  constexpr int64_t kLive = 5000, kTtl = 10000;
  auto counts = [&](int64_t age_ms, uint32_t flags = 0) {
    const RecordCount c = count_record(record(2, 3, 0, 0, age_ms, flags), kNow, kLive, kTtl);
    return std::make_pair(c.in_size, c.live);
  };
  EXPECT_EQ(counts(0), std::make_pair(true, true));
  EXPECT_EQ(counts(kLive), std::make_pair(true, true));
  // Aged past the live horizon (a loaded machine's copy): still a peer of the swarm, not of the sample.
  EXPECT_EQ(counts(kLive + 1), std::make_pair(true, false));
  EXPECT_EQ(counts(kTtl), std::make_pair(true, false));
  EXPECT_EQ(counts(kTtl + 1), std::make_pair(false, false));  // the DHT has dropped it: gone
  EXPECT_EQ(counts(0, ProgressRecord::kLeft), std::make_pair(false, false));  // a goodbye never counts
  EXPECT_EQ(counts(-2000), std::make_pair(true, true));  // a clock ahead of this peer's
}

TEST(Tracker, ASampledSwarmIsTheLivePartOfTheEstimate) {
  // 64 peers estimated from every record kept; the reads held 16 records,
  // 8 of them live: the 8 stand for half the swarm besides this peer.
  EXPECT_DOUBLE_EQ(sampled_swarm(64, 8, 16), 1 + 63 * 0.5);
  EXPECT_DOUBLE_EQ(sampled_swarm(64, 16, 16), 64);
  EXPECT_DOUBLE_EQ(sampled_swarm(64, 0, 0), 64);   // nothing read: the estimate as it is
  EXPECT_DOUBLE_EQ(sampled_swarm(64, 20, 16), 64);  // never above the estimate
  EXPECT_DOUBLE_EQ(sampled_swarm(1, 3, 4), 1);      // alone stays alone
}

}  // namespace
}  // namespace loom_collab
