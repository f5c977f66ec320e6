// SPDX-License-Identifier: Apache-2.0
// Counting samples truthfully: an epoch steps only once the samples its
// round's members actually averaged reach target_batch_size, and they exceed
// it by at most one batch per member, even with 8 peers sharing two cores
// (where the swarm's estimate, built from late records, runs ahead).
#include <gtest/gtest.h>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr int kPeers = 8;
constexpr int64_t kTarget = 2048;
constexpr int64_t kBatch = 64;  // teacher.toml's

TEST(SamplesPerRound, EightPeersAverageBetweenTheTargetAndOneBatchPerMemberMore) {
  Scratch scratch;
  const std::vector<std::string> sets = {
      "trainer.max_steps=12",         "trainer.threads=1", "trainer.val_every=0", "trainer.checkpoint_every=0",
      "trainer.log_every=4",          "strategy.name=collab",
      "strategy.options.target_batch_size=" + std::to_string(kTarget),
      "strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
      "strategy.options.min_peers=" + std::to_string(kPeers),
      "strategy.options.run_id=" + unique_run_id("samples")};
  auto peers = start_teacher_swarm(scratch, kPeers, sets);
  ASSERT_EQ(peers.size(), size_t(kPeers)) << "p0 never listened\n" << peers[0]->tail();
  const auto deadline = Clock::now() + seconds(170);
  size_t rounds = 0;
  for (auto& p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    for (const auto& r : averaged_rounds(p->log())) {
      ++rounds;
      EXPECT_GE(r.samples, kTarget) << p->name() << " epoch " << r.epoch << " with " << r.peers << " peers";
      EXPECT_LE(r.samples, kTarget + kBatch * r.peers) << p->name() << " epoch " << r.epoch << " with " << r.peers << " peers";
    }
  }
  EXPECT_GE(rounds, size_t(kPeers)) << "too few averaged rounds to judge";
}

}  // namespace
}  // namespace loom::swarm
