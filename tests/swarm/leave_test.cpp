// SPDX-License-Identifier: Apache-2.0
// Leaving well (hivemind #382): a peer sent SIGTERM mid-run finishes or
// leaves its round, publishes its goodbye and exits 0 within a bounded
// time, and the others' next epoch does not wait out averaging_timeout.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr double kAveragingTimeout = 30.0;  // long, so that waiting it out would show
constexpr int64_t kMaxSteps = 100;

TEST(Leaving, ASigtermedPeerLeavesWithExitZeroAndTheOthersGoOnWithoutWaitingForIt) {
  Scratch scratch;
  char timeout_set[64];
  std::snprintf(timeout_set, sizeof timeout_set, "strategy.options.averaging_timeout=%g", kAveragingTimeout);
  const std::vector<std::string> sets = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                         "strategy.options.run_id=" + unique_run_id("leave"),
                                         "trainer.max_steps=" + std::to_string(kMaxSteps), timeout_set,
                                         "strategy.options.matchmaking_time=1", "strategy.options.min_peers=3"};
  Peer p1(scratch, "p1", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !p1.address().empty(); }, seconds(30))) << p1.tail();
  const std::map<std::string, std::string> join = {{"LOOM_INITIAL_PEERS", p1.address()}};
  Peer p2(scratch, "p2", digits_config(), sets, join);
  Peer p3(scratch, "p3", digits_config(), sets, join);
  ASSERT_TRUE(wait_until([&] { return last_finished_epoch(p3.log()) >= 10; }, seconds(120))) << p3.tail();

  const int64_t epoch_at_stop = std::max(last_finished_epoch(p1.log()), last_finished_epoch(p2.log()));
  p3.signal(SIGTERM);
  const auto stopped = Clock::now();
  const int code = p3.wait_exit(seconds(20));
  const double left_s = std::chrono::duration<double>(Clock::now() - stopped).count();
  EXPECT_EQ(code, 0) << "left within " << left_s << " s\n" << p3.tail();
  const std::string log = p3.log();
  EXPECT_NE(log.find("SIGTERM received: training stops at step"), std::string::npos) << p3.tail();
  EXPECT_NE(log.find("its goodbye is published"), std::string::npos) << p3.tail();
  EXPECT_NE(log.find("stopped by SIGTERM after"), std::string::npos) << p3.tail();

  // The two others average on together, well inside averaging_timeout.
  double went_on_s = -1;
  wait_until(
      [&] {
        for (const auto& a : averaged_rounds(p1.log()))
          if (a.epoch > epoch_at_stop + 1 && a.peers == 2) {
            went_on_s = std::chrono::duration<double>(Clock::now() - stopped).count();
            return true;
          }
        return false;
      },
      seconds(90));
  ASSERT_GE(went_on_s, 0) << "p1 never averaged with p2 alone after p3 left\n" << p1.tail();
  EXPECT_LT(went_on_s, kAveragingTimeout / 3) << p1.tail();
  for (Peer* p : {&p1, &p2}) {
    EXPECT_EQ(p->wait_exit(seconds(120)), 0) << p->tail();
    auto result = final_result(p->log());
    ASSERT_TRUE(result) << p->tail();
    EXPECT_EQ(result->steps, kMaxSteps);
  }
  std::printf("[ figures ] p3 left %.2f s after SIGTERM; p1 averaged with p2 alone %.2f s after it\n", left_s, went_on_s);
}

}  // namespace
}  // namespace loom::swarm
