// SPDX-License-Identifier: Apache-2.0
// Bounded groups (target_group_size, Moshpit-style): six peers with groups
// of two average in three groups per epoch, split afresh every epoch; the
// groups together bring target_batch_size, the swarm converges, and after
// the last state averaging every peer's parameters lie within a stated
// tolerance of every other's, though no round ever held them all.
#include <gtest/gtest.h>

#include <regex>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr int kPeers = 6;
constexpr int64_t kTarget = 256;  // digits-collab.toml's
constexpr int64_t kBatch = 32;

// "averaged gradients of S samples with N peers (epoch E, attempt A, a
// bounded group of the M that met)": (N, M, S) of each bounded round.
struct BoundedRound {
  int peers = 0, met = 0;
  int64_t samples = 0;
};
std::vector<BoundedRound> bounded_rounds(const std::string &log) {
  static const std::regex re(
      R"(averaged gradients of ([0-9]+) samples with ([0-9]+) peers \(epoch [0-9]+, attempt [0-9]+, a bounded group of the ([0-9]+) that met\))");
  std::vector<BoundedRound> out;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it)
    out.push_back({std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoll((*it)[1])});
  return out;
}

TEST(BoundedGroups, SixPeersInGroupsOfTwoConvergeAndAgreeWithinTolerance) {
  Scratch scratch;
  const std::vector<std::string> sets = {
      "trainer.threads=1", "strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
      "strategy.options.target_group_size=2", "strategy.options.min_peers=" + std::to_string(kPeers),
      "strategy.options.run_id=" + unique_run_id("bounded")};
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(std::make_unique<Peer>(scratch, "p0", digits_config(), sets));
  ASSERT_TRUE(wait_until([&] { return !peers[0]->address().empty(); }, seconds(30))) << peers[0]->tail();
  for (int i = 1; i < kPeers; ++i)
    peers.push_back(std::make_unique<Peer>(scratch, "p" + std::to_string(i), digits_config(), sets,
                                           std::map<std::string, std::string>{{"LOOM_INITIAL_PEERS", peers[0]->address()}}));
  const auto deadline = Clock::now() + seconds(240);
  size_t bounded = 0, split_three_ways = 0, over = 0;
  int64_t built = 0, through_hub = 0, through_dht = 0, hub_parts = 0;
  for (auto &p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    const std::string log = p->log();
    auto final = final_result(log);
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.93) << p->name();
    EXPECT_EQ(final->steps, 100) << p->name();
    const CommunicatorsBuilt c = communicators_built(log);
    ASSERT_GE(c.total, 0) << "no communicators line: " << p->tail();
    built += c.total;
    through_hub += c.hub;
    through_dht += c.dht;
    hub_parts += c.hub_parts;
    for (const auto &r : bounded_rounds(log)) {
      ++bounded;
      EXPECT_LE(r.peers, 3) << p->name();  // groups of two (three when an odd number met)
      split_three_ways += r.met == kPeers && r.peers == 2;
      // A group brings its share of the target, at most a batch per member more.
      const int64_t share = (kTarget * r.peers + r.met - 1) / r.met;
      EXPECT_GE(r.samples, share) << p->name() << ": " << r.peers << " of " << r.met;
      // More only when a member missed the previous epoch's group (it was
      // late to matchmaking) and brings its gradients along, as without bounds.
      over += r.samples > share + kBatch * r.peers;
    }
  }
  EXPECT_GE(bounded, size_t(kPeers) * 20) << "too few bounded rounds: the swarm rarely split";
  // Every group's addresses went through its leader's hub (oob_hub.h),
  // the groups the leader was not in included: none through the DHT.
  std::printf("[ figures  ] %lld communicators built: %lld through the hub, %lld through the DHT; %lld parts came "
              "to hubs\n",
              static_cast<long long>(built), static_cast<long long>(through_hub), static_cast<long long>(through_dht),
              static_cast<long long>(hub_parts));
  EXPECT_EQ(through_hub, built);
  EXPECT_EQ(through_dht, 0);
  EXPECT_GE(hub_parts, built);
  EXPECT_GE(split_three_ways, size_t(kPeers) * 5) << "the six peers rarely met in three groups of two";
  EXPECT_LE(over * 20, bounded) << over << " of " << bounded
                                << " rounds averaged over a batch per member more than their share";
  // The last epoch averages the state within each group; the groups, mixed
  // every epoch, agree within the tolerance (one group's members exactly).
  double widest = 0;
  int exact = 0;
  for (int a = 0; a < kPeers; ++a)
    for (int b = a + 1; b < kPeers; ++b) {
      const double d = max_parameter_difference(peers[a]->final_dir(), peers[b]->final_dir());
      widest = std::max(widest, d);
      exact += d <= 1e-6;
    }
  std::printf("largest parameter difference between two of the %d peers: %.3g (%d pairs equal)\n", kPeers, widest,
              exact);
  EXPECT_LE(widest, 0.01);
  EXPECT_GE(exact, 1) << "no two peers hold the same parameters: the last state averaging did not happen";
}

}  // namespace
}  // namespace loom::swarm
