// SPDX-License-Identifier: Apache-2.0
// average_optimizer_state: two peers train with SGD at different momentum
// coefficients, so their momentum buffers differ although every round
// averages their gradients. With the option the last epoch's state averaging
// leaves both with the same buffers (within 1e-6); without it they stay apart
// (the control that shows the comparison can fail).
#include <gtest/gtest.h>

#include <cstdio>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

struct Pair {
  double params = 0, optimizer = 0;
  bool logged = false;  // "averaged the optimizer's statistics"
};

Pair train_pair(const Scratch& scratch, const std::string& tag, bool average) {
  std::vector<std::string> sets = {"trainer.max_steps=12", "trainer.optimizer=sgd", "trainer.val_every=0",
                                   "trainer.checkpoint_every=0", "strategy.options.listen=127.0.0.1",
                                   "strategy.options.min_peers=2", "strategy.options.verbose=true",
                                   "strategy.options.average_state_every=4",
                                   std::string("strategy.options.average_optimizer_state=") + (average ? "true" : "false"),
                                   "strategy.options.run_id=" + unique_run_id("optimizer-" + tag)};
  auto first = sets, second = sets;
  first.push_back("trainer.momentum=0.9");
  second.push_back("trainer.momentum=0.5");
  Peer a(scratch, tag + "-a", digits_config(), first);
  EXPECT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, tag + "-b", digits_config(), second, {{"LOOM_INITIAL_PEERS", a.address()}});
  EXPECT_EQ(a.wait_exit(seconds(90)), 0) << a.tail();
  EXPECT_EQ(b.wait_exit(seconds(30)), 0) << b.tail();
  Pair r;
  r.params = max_parameter_difference(a.final_dir(), b.final_dir());
  r.optimizer = max_parameter_difference(a.final_dir(), b.final_dir(), "optimizer");
  r.logged = a.log().find("averaged the optimizer's statistics") != std::string::npos &&
             b.log().find("averaged the optimizer's statistics") != std::string::npos;
  if (r.params > 1e-6) ADD_FAILURE() << tag << ": parameters differ by " << r.params << "\n" << a.tail() << b.tail();
  return r;
}

TEST(Swarm, AverageOptimizerStateLeavesPeersWithTheSameStatistics) {
  Scratch scratch;
  const Pair with = train_pair(scratch, "with", true);
  const Pair without = train_pair(scratch, "without", false);
  std::printf("[ figures  ] momentum buffers differ by %.3g with average_optimizer_state, %.3g without\n",
              with.optimizer, without.optimizer);
  EXPECT_TRUE(with.logged) << "a peer never logged averaging its optimizer's statistics";
  EXPECT_LE(with.optimizer, 1e-6);
  EXPECT_FALSE(without.logged);
  EXPECT_GT(without.optimizer, 1e-4) << "the control run's buffers agree: the test could not tell the option's effect";
}

}  // namespace
}  // namespace loom::swarm
