// SPDX-License-Identifier: Apache-2.0
// Three peers train `digits` together: one starts the swarm, one joins
// through LOOM_INITIAL_PEERS, one through the initial_peers option.
#include <gtest/gtest.h>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

TEST(Swarm, ThreePeersTrainDigits) {
  Scratch scratch;
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("three"),
                                           "strategy.options.min_peers=3"};
  Peer first(scratch, "p1", digits_config(), common);
  ASSERT_TRUE(wait_until([&] { return !first.address().empty(); }, seconds(30))) << first.tail();
  const std::string address = first.address();

  Peer by_env(scratch, "p2", digits_config(), common, {{"LOOM_INITIAL_PEERS", address}});
  auto with_option = common;
  with_option.push_back("strategy.options.initial_peers=" + address);
  Peer by_option(scratch, "p3", digits_config(), with_option);

  Peer* peers[] = {&first, &by_env, &by_option};
  const auto deadline = Clock::now() + seconds(150);
  for (Peer* p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
  }
  for (Peer* p : {&by_env, &by_option})
    EXPECT_NE(p->log().find("joined the swarm through " + address), std::string::npos) << p->tail();
  for (Peer* p : peers) {
    const std::string log = p->log();
    auto final = final_result(log);
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.93) << p->name();
    EXPECT_EQ(final->steps, 100) << p->name();  // max_steps of digits-collab.toml
    int with_three = 0, ahead = 0;
    for (const auto& round : averaged_rounds(log)) {
      with_three += round.peers == 3;
      ahead += round.ahead;
    }
    EXPECT_GE(with_three, 1) << p->name() << " never averaged with all three peers\n" << p->tail();
    // Matchmaking starts before the target once the peers' rates are known.
    EXPECT_GE(ahead, 1) << p->name() << " never formed its group ahead of the target\n" << p->tail();
  }
  // The last epoch ends with state averaging: every peer holds the same parameters.
  EXPECT_LE(max_parameter_difference(first.final_dir(), by_env.final_dir()), 1e-6);
  EXPECT_LE(max_parameter_difference(first.final_dir(), by_option.final_dir()), 1e-6);
}

}  // namespace
}  // namespace loom::swarm
