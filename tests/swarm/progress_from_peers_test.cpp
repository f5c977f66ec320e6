// SPDX-License-Identifier: Apache-2.0
// Progress from peers (progress_source = "peers", the default): between DHT
// reads a peer reads the progress records another peer's state server holds
// and pushes its own there (peer_progress.cpp, progress_push.h). Four real
// processes with progress_source = "peers" train together; nearly all their
// reads come from each other, every full peer answers some and takes the
// readers' records, and every round still holds target_batch_size samples.
// Under the default ("auto") four peers read the DHT alone, as "dht" does.
#include <gtest/gtest.h>

#include <regex>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr int kPeers = 4;
constexpr int64_t kTarget = 1024;

struct Reads {
  long total = -1, dht = -1, tables = -1, failed = -1, answered = -1, pushed = -1;
};
// The peer's last line on its reads ("read the swarm's progress N times ...").
Reads reads_of(const std::string& log) {
  static const std::regex line(
      R"(read the swarm's progress (\d+) times .*; (\d+) DHT reads \([0-9.]+ a second\), (\d+) of peers' tables )"
      R"(\((\d+) failed, \d+ bytes\); answered (\d+) progress requests; took (\d+) records pushed)");
  Reads r;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    r.total = std::stol((*it)[1]);
    r.dht = std::stol((*it)[2]);
    r.tables = std::stol((*it)[3]);
    r.failed = std::stol((*it)[4]);
    r.answered = std::stol((*it)[5]);
    r.pushed = std::stol((*it)[6]);
  }
  return r;
}

std::vector<std::string> sets_for(const std::string& source) {
  auto sets = teacher_round_sets("progress-" + source, kPeers, kTarget);
  sets.push_back("strategy.options.progress_source=" + source);
  return sets;
}

// Runs the swarm to its end; each peer's log.
std::vector<std::string> run_swarm(const Scratch& scratch, const std::string& source) {
  auto peers = start_teacher_swarm(scratch, kPeers, sets_for(source));
  EXPECT_EQ(peers.size(), size_t(kPeers)) << "p0 never listened\n" << peers[0]->tail();
  std::vector<std::string> logs;
  const auto deadline = Clock::now() + seconds(150);
  for (auto& p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    EXPECT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    logs.push_back(p->log());
  }
  return logs;
}

// Each peer's reads line; a peer that logged none is a failure, and is
// left out (so the caller's count check stops the test).
std::vector<Reads> reads_of_each(const std::vector<std::string>& logs) {
  std::vector<Reads> out;
  for (size_t i = 0; i < logs.size(); ++i) {
    const Reads r = reads_of(logs[i]);
    if (r.total < 0) ADD_FAILURE() << "p" << i << " logged no reads line";
    else out.push_back(r);
  }
  return out;
}

void expect_full_rounds(const std::vector<std::string>& logs) {
  size_t rounds = 0;
  for (size_t i = 0; i < logs.size(); ++i) {
    for (const auto& r : averaged_rounds(logs[i])) {
      ++rounds;
      EXPECT_GE(r.samples, kTarget) << "p" << i << " epoch " << r.epoch << " with " << r.peers << " peers";
    }
    EXPECT_EQ(last_finished_epoch(logs[i]), 29) << "p" << i;
  }
  EXPECT_GE(rounds, logs.size()) << "too few averaged rounds to judge";
}

TEST(ProgressFromPeers, FourPeersReadMostProgressFromEachOtherAndAverageFullRounds) {
  Scratch scratch;
  const auto logs = run_swarm(scratch, "peers");
  const auto reads = reads_of_each(logs);
  ASSERT_EQ(reads.size(), size_t(kPeers));
  for (size_t i = 0; i < reads.size(); ++i) {
    const Reads& r = reads[i];
    std::printf("p%zu: %ld reads, %ld from the DHT, %ld of peers' tables (%ld failed), answered %ld, took %ld "
                "pushed records\n",
                i, r.total, r.dht, r.tables, r.failed, r.answered, r.pushed);
    // A peer's DHT reads of progress come 8 s apart here (4 peers; the
    // swarm's together 0.5 a second), 2 s while it is alone (the first
    // peer waits for the others): a few in the run, every other read asks
    // a peer (with 4 a second before pushes: about 1 in 8 here).
    EXPECT_LE(r.dht * 5, r.total) << "p" << i;
    // Each read pushed the reader's record: every server that answered took
    // some (a push counts when its request is admitted, an answer once sent:
    // a reader that left in between makes one more push than answers).
    EXPECT_GT(r.pushed, 0) << "p" << i;
    EXPECT_LE(r.pushed, r.answered + 3) << "p" << i;
    EXPECT_LE(r.failed, r.tables / 4 + 2) << "p" << i;  // peers that finish first stop answering
    EXPECT_GT(r.answered, 0) << "p" << i;
  }
  expect_full_rounds(logs);
}

// "dht": every read a DHT read, nothing asked of peers or pushed; so is
// "auto", the default, below 8 peers (a new peer is seen at once, and a
// small swarm's reads cost little).
class DhtOnly : public ::testing::TestWithParam<std::string> {};

TEST_P(DhtOnly, FourPeersReadTheDhtAloneAndPushNothing) {
  Scratch scratch;
  const auto logs = run_swarm(scratch, GetParam());
  const auto reads = reads_of_each(logs);
  ASSERT_EQ(reads.size(), size_t(kPeers));
  for (size_t i = 0; i < reads.size(); ++i) {
    const Reads& r = reads[i];
    EXPECT_EQ(r.tables, 0) << "p" << i;
    EXPECT_EQ(r.answered, 0) << "p" << i;
    EXPECT_EQ(r.pushed, 0) << "p" << i;
    EXPECT_EQ(r.dht, r.total) << "p" << i;
  }
  expect_full_rounds(logs);
}

INSTANTIATE_TEST_SUITE_P(ProgressSource, DhtOnly, ::testing::Values("auto", "dht"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom::swarm
