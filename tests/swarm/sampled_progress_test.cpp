// SPDX-License-Identifier: Apache-2.0
// Sampled progress (progress_shards.h) with real processes: 8 peers with
// progress_shard_peers = 2 spread their records over several DHT keys, each
// reading two of them, and still train together: every round they average
// holds at least target_batch_size samples, and they finish as one swarm.
// `loom swarm status` finds the shards and lists all eight.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <regex>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

constexpr int kPeers = 8;
constexpr int64_t kTarget = 2048;
constexpr int64_t kBatch = 64;  // teacher.toml's
constexpr int kPerShard = 2;     // progress_shard_peers
// Long enough that the swarm is still up when `loom swarm status` has
// joined the DHT and settled (about 3 s): with kept communicators 30
// epochs were over by then.
constexpr int64_t kSteps = 90;

TEST(SampledProgress, EightPeersOverSeveralKeysAverageFullRoundsAndFinishTogether) {
  Scratch scratch;
  const std::vector<std::string> sets = {
      "trainer.max_steps=" + std::to_string(kSteps),       "trainer.threads=1", "trainer.val_every=0", "trainer.checkpoint_every=0",
      "trainer.log_every=4",          "strategy.name=collab",
      "strategy.options.target_batch_size=" + std::to_string(kTarget),
      "strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
      "strategy.options.progress_shard_peers=" + std::to_string(kPerShard),
      "strategy.options.min_peers=" + std::to_string(kPeers),
      "strategy.options.run_id=" + unique_run_id("sampled")};
  auto peers = start_teacher_swarm(scratch, kPeers, sets);
  ASSERT_EQ(peers.size(), size_t(kPeers)) << "p0 never listened\n" << peers[0]->tail();
  const std::string run_id = sets.back().substr(sets.back().find('=') + 1);
  ASSERT_TRUE(wait_until([&] { return peers[0]->log().find("progress records are spread over") != std::string::npos; },
                         seconds(60)))
      << peers[0]->tail();
  auto r = loom::test::run_process({kLoomBinary, "swarm", "status", "--initial-peers", peers[0]->address(),
                                    "--run-id", run_id, "--json", "--once"},
                                   {}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto snapshot = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(snapshot.is_discarded()) << r.out;
  EXPECT_EQ(snapshot["peers"].size(), size_t(kPeers)) << snapshot.dump(2);
  const auto deadline = Clock::now() + seconds(170);
  size_t rounds = 0, sampled = 0;
  int64_t total = 0;
  const std::regex spread(R"(the swarm has about (\d+) peers: progress records are spread over (\d+) keys)");
  for (auto& p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    const std::string log = p->log();
    for (std::sregex_iterator it(log.begin(), log.end(), spread), end; it != end; ++it) {
      if (sampled++ == 0) std::printf("%s: %s\n", p->name().c_str(), it->str().c_str());
      const int estimate = std::stoi((*it)[1]), keys = std::stoi((*it)[2]);
      EXPECT_GE(estimate, 4) << p->name() << ": " << it->str();
      EXPECT_LE(estimate, 16) << p->name() << ": " << it->str();
      // Each key holds about progress_shard_peers to twice that many of the
      // swarm's peers (with the bands' slack, progress_shards.cpp). Judged
      // on the swarm's true size: a level is kept for ShardPlan::kFallAfterMs
      // while its estimate dips below its range, and the line may log such
      // a dip (4 peers on 4 keys, 1 of 5 runs).
      EXPECT_GE(double(kPeers) / keys, kPerShard / 1.5) << p->name() << ": " << it->str();
      EXPECT_LE(double(kPeers) / keys, 2 * kPerShard * 1.5) << p->name() << ": " << it->str();
    }
    for (const auto& r : averaged_rounds(log)) {
      ++rounds;
      total += r.samples;
      EXPECT_GE(r.samples, kTarget) << p->name() << " epoch " << r.epoch << " with " << r.peers << " peers";
    }
    EXPECT_EQ(last_finished_epoch(log), kSteps - 1) << p->name() << "\n" << p->tail();
  }
  EXPECT_GE(sampled, size_t(kPeers)) << "every peer reads sampled progress";
  ASSERT_GE(rounds, size_t(kPeers)) << "too few averaged rounds to judge";
  // Sampling trades exactness for cost: the swarm's estimate may run late
  // by a share of the target, not by multiples of it.
  const double mean = double(total) / double(rounds);
  std::printf("%zu averaged rounds, %.0f samples each on average (target %lld)\n", rounds, mean,
              static_cast<long long>(kTarget));
  EXPECT_LE(mean, 1.5 * double(kTarget));
}

}  // namespace
}  // namespace loom::swarm
