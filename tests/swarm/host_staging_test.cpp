// SPDX-License-Identifier: Apache-2.0
// What a GPU peer is in a swarm of CPU peers, on the CPU: a peer whose
// trainer lends collab host copies of its state (trainer.host_staging =
// "always", what a CUDA peer gets) trains with a plain peer, and a staged
// late joiner loads the swarm's state through the staged restore. Each ends
// with the swarm's parameters and digits' accuracy. The pair's epochs take
// about 50 ms; at 100 of them a late joiner slowed by a loaded machine
// loaded state twice and never averaged before the run ended (CI, stop 44),
// so the run is 300 epochs long, as LateJoiner's; and the pair steps at
// 20 ms at least, for at 300 epochs in the full suite the late joiner
// still started after the pair had finished and trained alone (session 29).
#include <gtest/gtest.h>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

TEST(Swarm, PeersOnHostCopiesTrainWithPlainPeersAndLoadTheState) {
  Scratch scratch;
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("staged"),
                                           "strategy.options.load_state_timeout=20", "trainer.max_steps=300"};
  auto pair = slowed(common, 20);
  pair.push_back("strategy.options.min_peers=2");
  Peer plain(scratch, "plain", digits_config(), pair);
  ASSERT_TRUE(wait_until([&] { return !plain.address().empty(); }, seconds(30))) << plain.tail();
  auto staged_sets = pair;
  staged_sets.push_back("trainer.host_staging=\"always\"");
  Peer staged(scratch, "staged", digits_config(), staged_sets, {{"LOOM_INITIAL_PEERS", plain.address()}});
  ASSERT_TRUE(wait_until([&] { return last_finished_epoch(staged.log()) >= 5 || !staged.running(); }, seconds(90)))
      << plain.tail() << staged.tail();
  auto late_sets = common;
  late_sets.push_back("trainer.host_staging=\"always\"");
  Peer late(scratch, "late", digits_config(), late_sets, {{"LOOM_INITIAL_PEERS", plain.address()}});

  Peer* peers[] = {&plain, &staged, &late};
  const auto deadline = Clock::now() + seconds(150);
  for (Peer* p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
  }
  for (Peer* p : {&staged, &late})
    EXPECT_NE(p->log().find("strategy collab works on host memory"), std::string::npos) << p->tail();
  EXPECT_FALSE(loaded_states(late.log()).empty()) << late.tail();
  for (Peer* p : peers) {
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.93) << p->name();
    int together = 0;
    for (const auto& round : averaged_rounds(p->log())) together += round.peers >= 2;
    EXPECT_GE(together, 1) << p->name() << " never averaged with another peer\n" << p->tail();
  }
  // The last epoch ends with state averaging: staged or not, one set of parameters.
  EXPECT_LE(max_parameter_difference(plain.final_dir(), staged.final_dir()), 1e-6);
  EXPECT_LE(max_parameter_difference(plain.final_dir(), late.final_dir()), 1e-6);
}

}  // namespace
}  // namespace loom::swarm
