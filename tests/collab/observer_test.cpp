// SPDX-License-Identifier: Apache-2.0
// What `loom swarm status` makes of progress records (observer.h): live
// peers only, rounds grouped by their hash, the swarm's rate and time to the
// next epoch, the loss per epoch weighted by windows, and its CSV file.
#include "observer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace loom_collab {
namespace {

constexpr int64_t kNow = 1700000000000;

ProgressRecord peer(uint64_t id, int64_t epoch, uint64_t samples, double rate, int64_t age_ms = 100) {
  ProgressRecord r;
  r.peer_id = id;
  r.epoch = epoch;
  r.samples = samples;
  r.samples_per_second = rate;
  r.time_ms = kNow - age_ms;
  r.target_batch_size = 1000;
  r.state_host = "10.0.0." + std::to_string(id);
  r.state_port = 4000;
  r.fingerprint = 0xabc;
  return r;
}

std::string temp_path(const std::string &name) {
  return ::testing::TempDir() + "/observer-" + std::to_string(::getpid()) + "-" + name;
}

TEST(SwarmObserver, ListsLivePeersOnlyAndEstimatesTheNextEpoch) {
  SwarmObserver o(5000);
  o.merge(peer(1, 7, 300, 100));
  o.merge(peer(2, 7, 200, 100));
  o.merge(peer(3, 7, 100, 100, 6000));  // expired
  ProgressRecord left = peer(4, 7, 100, 100);
  left.flags = ProgressRecord::kLeft;
  o.merge(left);
  const SwarmSnapshot s = o.snapshot(kNow);
  ASSERT_EQ(s.peers.size(), 2u);
  EXPECT_EQ(s.peers[0].peer_id, 1u);
  EXPECT_EQ(s.peers[1].peer_id, 2u);
  EXPECT_EQ(s.epoch, 7);
  EXPECT_EQ(s.target_batch_size, 1000u);
  EXPECT_DOUBLE_EQ(s.samples_per_second, 200);
  // 300 + 200 samples, each extrapolated 0.1 s at 100/s.
  EXPECT_EQ(s.samples, 520u);
  ASSERT_TRUE(s.eta_s);
  EXPECT_NEAR(*s.eta_s, 480.0 / 200.0, 1e-9);
  EXPECT_EQ(s.models, 1u);
}

TEST(SwarmObserver, AnEmptySwarmHasNoEstimate) {
  SwarmObserver o;
  const SwarmSnapshot s = o.snapshot(kNow);
  EXPECT_TRUE(s.peers.empty());
  EXPECT_FALSE(s.eta_s);
  EXPECT_FALSE(s.mean_loss);
  const auto json = nlohmann::json::parse(snapshot_json(s, "r"));
  EXPECT_EQ(json["swarm"]["peers"], 0);
  EXPECT_TRUE(json["swarm"]["eta_s"].is_null());
  EXPECT_NE(snapshot_text(s, "r").find("no live peer seen"), std::string::npos);
}

TEST(SwarmObserver, GroupsARoundsMembersByItsHash) {
  SwarmObserver o;
  for (uint64_t id : {1, 2, 3}) {
    ProgressRecord r = peer(id, 5, 0, 10);
    // 1 and 2 averaged together at epoch 4; 3 alone with someone not seen.
    r.last_round = {4, id == 3 ? 0x33u : 0x12u, 2, 1000, float(id), float(10 * id)};
    o.merge(r);
  }
  const SwarmSnapshot s = o.snapshot(kNow);
  ASSERT_EQ(s.rounds.size(), 2u);
  for (const auto &r : s.rounds) {
    EXPECT_EQ(r.epoch, 4);
    EXPECT_EQ(r.size, 2u);
    if (r.group == 0x12) {
      EXPECT_EQ(r.members_seen, (std::set<uint64_t>{1, 2}));
      EXPECT_DOUBLE_EQ(r.round_ms, 20);       // the slower member's
      EXPECT_DOUBLE_EQ(r.matchmaking_ms, 2);  // the longest wait
    } else {
      EXPECT_EQ(r.members_seen, (std::set<uint64_t>{3}));
    }
  }
  const auto json = nlohmann::json::parse(snapshot_json(s, "r"));
  ASSERT_EQ(json["rounds"].size(), 2u);
  EXPECT_EQ(json["rounds"][0]["epoch"], 4);
}

TEST(SwarmObserver, AveragesTheLossOverFinitePeersAndCountsTheOthers) {
  SwarmObserver o;
  ProgressRecord a = peer(1, 3, 0, 10), b = peer(2, 3, 0, 10), c = peer(3, 3, 0, 10), d = peer(4, 3, 0, 10);
  a.last_loss = 1.0f;
  b.last_loss = 3.0f;
  c.last_loss = std::numeric_limits<float>::infinity();
  d.last_loss = std::numeric_limits<float>::quiet_NaN();  // has not trained yet: not counted
  for (const auto &r : {a, b, c, d}) o.merge(r);
  const SwarmSnapshot s = o.snapshot(kNow);
  ASSERT_TRUE(s.mean_loss);
  EXPECT_DOUBLE_EQ(*s.mean_loss, 2.0);
  EXPECT_EQ(s.nonfinite_losses, 1u);
  const auto json = nlohmann::json::parse(snapshot_json(s, "r"));
  EXPECT_TRUE(json["peers"][2]["loss"].is_null());  // JSON has no inf: null
  EXPECT_NE(snapshot_text(s, "r").find("1 peer(s) report a loss that is not finite"), std::string::npos);
}

TEST(SwarmObserver, EpochLossesAreWeightedByWindowsAndTakenOnce) {
  SwarmObserver o;
  ProgressRecord a = peer(1, 5, 0, 10), b = peer(2, 5, 0, 10), c = peer(3, 5, 0, 10);
  a.loss_epoch = b.loss_epoch = c.loss_epoch = 4;
  a.epoch_loss = 1.0f;
  a.loss_windows = 3;
  b.epoch_loss = 2.0f;
  b.loss_windows = 1;
  c.epoch_loss = std::numeric_limits<float>::quiet_NaN();
  c.loss_windows = 2;
  for (const auto &r : {a, b, c}) o.merge(r);
  EXPECT_TRUE(o.take_losses(4).empty());  // epoch 4 is not below 4
  auto rows = o.take_losses(5);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].epoch, 4);
  ASSERT_TRUE(rows[0].mean);
  EXPECT_DOUBLE_EQ(*rows[0].mean, (1.0 * 3 + 2.0 * 1) / 4);
  EXPECT_EQ(rows[0].peers, 3u);
  EXPECT_EQ(rows[0].windows, 6u);
  EXPECT_EQ(rows[0].nonfinite, 1u);
  // A later record of epoch 4 does not bring it back.
  a.time_ms += 10;
  o.merge(a);
  EXPECT_TRUE(o.take_all_losses().empty());
}

TEST(SwarmObserver, EpochsAlreadyInTheFileAreSkipped) {
  SwarmObserver o;
  o.skip_losses_through(9);
  ProgressRecord a = peer(1, 12, 0, 10);
  a.loss_epoch = 9;
  a.epoch_loss = 1;
  a.loss_windows = 1;
  o.merge(a);
  a.time_ms += 1;
  a.loss_epoch = 11;
  o.merge(a);
  auto rows = o.take_all_losses();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].epoch, 11);
}

TEST(LossCsv, WritesItsHeaderOnceAndResumesAfterTheLastEpoch) {
  const std::string path = temp_path("resume.csv");
  std::remove(path.c_str());
  LossCsv csv;
  int64_t last = 0;
  std::string why;
  ASSERT_TRUE(csv.open(path, &last, &why)) << why;
  EXPECT_EQ(last, -1);
  SwarmObserver::EpochLoss row;
  row.epoch = 3;
  row.mean = 0.5;
  row.peers = 2;
  row.windows = 4;
  SwarmObserver::EpochLoss bad = row;
  bad.epoch = 4;
  bad.mean.reset();
  bad.nonfinite = 2;
  ASSERT_TRUE(csv.append({row, bad}, 42, &why)) << why;
  LossCsv again;
  ASSERT_TRUE(again.open(path, &last, &why)) << why;
  EXPECT_EQ(last, 4);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), std::string(LossCsv::kHeader) + "\n3,0.500000,2,4,0,42\n4,nan,2,4,2,42\n");
  std::remove(path.c_str());
}

TEST(LossCsv, RefusesAFileItDidNotWrite) {
  const std::string path = temp_path("other.csv");
  std::ofstream(path) << "a,b,c\n1,2,3\n";
  LossCsv csv;
  int64_t last = 0;
  std::string why;
  EXPECT_FALSE(csv.open(path, &last, &why));
  EXPECT_NE(why.find("is not a loom swarm status CSV: its first line is 'a,b,c'"), std::string::npos) << why;
  std::ofstream(path) << LossCsv::kHeader << "\nseven,1,1,1,0,1\n";
  EXPECT_FALSE(csv.open(path, &last, &why));
  EXPECT_NE(why.find("does not start with an epoch"), std::string::npos) << why;
  EXPECT_FALSE(csv.open("/nonexistent-folder/x.csv", &last, &why));
  EXPECT_NE(why.find("cannot write /nonexistent-folder/x.csv"), std::string::npos) << why;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom_collab
