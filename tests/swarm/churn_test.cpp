// SPDX-License-Identifier: Apache-2.0
// Churn: four peers; two are SIGKILLed while rounds run, the survivors go on
// within averaging_timeout + matchmaking_time, the killed peers are started
// again, load the swarm's state, average again, and every peer ends with the
// same parameters.
#include <gtest/gtest.h>

#include <cstdio>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

constexpr double kAveragingTimeout = 10.0;  // seconds, set below
constexpr double kMatchmakingTime = 1.0;
constexpr int64_t kMaxSteps = 150;

int64_t swarm_epoch(const std::vector<Peer*>& peers) {
  int64_t e = -1;
  for (Peer* p : peers) e = std::max(e, last_finished_epoch(p->log()));
  return e;
}

struct Recovery {
  int64_t epoch_at_kill = 0;
  double all_survivors_s = -1;  // until every survivor saw an epoch after epoch_at_kill finished
  double averaged_s = -1;       // until a survivor averaged an epoch after epoch_at_kill
};

// SIGKILLs victim, then watches the survivors' logs grow.
Recovery kill_and_watch(Peer& victim, const std::vector<Peer*>& survivors) {
  victim.kill();
  const auto killed = Clock::now();
  Recovery r;
  r.epoch_at_kill = swarm_epoch(survivors);
  std::vector<bool> moved(survivors.size(), false);
  wait_until(
      [&] {
        const double t = std::chrono::duration<double>(Clock::now() - killed).count();
        bool all = true;
        for (size_t i = 0; i < survivors.size(); ++i) {
          const std::string log = survivors[i]->log();
          if (!moved[i] && last_finished_epoch(log) > r.epoch_at_kill) moved[i] = true;
          if (r.averaged_s < 0)
            for (const auto& a : averaged_rounds(log))
              if (a.epoch > r.epoch_at_kill) r.averaged_s = t;
          all = all && moved[i];
        }
        if (all && r.all_survivors_s < 0) r.all_survivors_s = t;
        return r.all_survivors_s >= 0 && r.averaged_s >= 0;
      },
      seconds(60));
  return r;
}

TEST(Swarm, ChurnKilledPeersRestartLoadStateAndAverageAgain) {
  Scratch scratch;
  char timeout_set[64], matchmaking_set[64];
  std::snprintf(timeout_set, sizeof timeout_set, "strategy.options.averaging_timeout=%g", kAveragingTimeout);
  std::snprintf(matchmaking_set, sizeof matchmaking_set, "strategy.options.matchmaking_time=%g", kMatchmakingTime);
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("churn"),
                                           "trainer.max_steps=" + std::to_string(kMaxSteps), timeout_set,
                                           matchmaking_set};
  auto first_four = common;
  first_four.push_back("strategy.options.min_peers=4");
  Peer p1(scratch, "p1", digits_config(), first_four);
  ASSERT_TRUE(wait_until([&] { return !p1.address().empty(); }, seconds(30))) << p1.tail();
  const std::map<std::string, std::string> join_p1 = {{"LOOM_INITIAL_PEERS", p1.address()}};
  Peer p2(scratch, "p2", digits_config(), first_four, join_p1);
  auto p3 = std::make_unique<Peer>(scratch, "p3", digits_config(), first_four, join_p1);
  auto p4 = std::make_unique<Peer>(scratch, "p4", digits_config(), first_four, join_p1);

  // First kill: p3, at whatever point of a round it is once epoch 15 is done.
  ASSERT_TRUE(wait_until([&] { return swarm_epoch({&p1, &p2}) >= 15; }, seconds(90)))
      << p1.tail() << p3->tail();
  const Recovery first = kill_and_watch(*p3, {&p1, &p2, p4.get()});
  // Second kill: p4 right after it logged an averaged round (between rounds),
  // once the survivors went on for five more epochs.
  ASSERT_TRUE(wait_until([&] { return swarm_epoch({&p1, &p2}) >= first.epoch_at_kill + 6; }, seconds(60)))
      << p1.tail();
  const size_t rounds_before = averaged_rounds(p4->log()).size();
  ASSERT_TRUE(wait_until([&] { return averaged_rounds(p4->log()).size() > rounds_before; }, seconds(30), milliseconds(5)))
      << p4->tail();
  const Recovery second = kill_and_watch(*p4, {&p1, &p2});

  const double bound = kAveragingTimeout + kMatchmakingTime;
  std::printf("[ figures  ] kill 1 (after epoch %lld): every survivor past it in %.2f s, next averaged epoch in %.2f s\n",
              static_cast<long long>(first.epoch_at_kill), first.all_survivors_s, first.averaged_s);
  std::printf("[ figures  ] kill 2 (after epoch %lld): every survivor past it in %.2f s, next averaged epoch in %.2f s\n",
              static_cast<long long>(second.epoch_at_kill), second.all_survivors_s, second.averaged_s);
  for (const Recovery* r : {&first, &second}) {
    EXPECT_GE(r->all_survivors_s, 0) << "the survivors did not finish the epoch after " << r->epoch_at_kill << "\n"
                                     << p1.tail() << p2.tail();
    EXPECT_LE(r->all_survivors_s, bound) << "averaging_timeout + matchmaking_time = " << bound << " s\n" << p1.tail();
    EXPECT_GE(r->averaged_s, 0) << "no averaged round after epoch " << r->epoch_at_kill << "\n" << p1.tail();
  }

  // Both start again: fresh output folders, the same run, through a live peer
  // other than the first.
  const std::map<std::string, std::string> join_p2 = {{"LOOM_INITIAL_PEERS", p2.address()}};
  ASSERT_FALSE(p2.address().empty());
  p3 = std::make_unique<Peer>(scratch, "p3-again", digits_config(), common, join_p2);
  p4 = std::make_unique<Peer>(scratch, "p4-again", digits_config(), common, join_p2);
  for (Peer* p : {p3.get(), p4.get()}) {
    ASSERT_TRUE(wait_until([&] { return !loaded_states(p->log()).empty() || !p->running(); }, seconds(90)))
        << p->tail();
    const auto loaded = loaded_states(p->log());
    ASSERT_FALSE(loaded.empty()) << p->name() << " did not load the swarm's state\n" << p->tail();
    const Loaded& l = loaded.front();
    EXPECT_GT(l.epoch, second.epoch_at_kill) << p->name();
    std::printf("[ figures  ] %s loaded the state of epoch %lld (%llu bytes) in %.3f s, %.1f s after its start\n",
                p->name().c_str(), static_cast<long long>(l.epoch), static_cast<unsigned long long>(l.bytes), l.seconds,
                std::chrono::duration<double>(Clock::now() - p->started()).count());
    // It takes part in averaging again, from the epoch it loaded on.
    EXPECT_TRUE(wait_until(
        [&] {
          for (const auto& a : averaged_rounds(p->log()))
            if (a.epoch >= l.epoch && a.peers >= 2) return true;
          return !p->running();
        },
        seconds(60)))
        << p->tail();
    bool rejoined = false;
    for (const auto& a : averaged_rounds(p->log())) rejoined = rejoined || (a.epoch >= l.epoch && a.peers >= 2);
    EXPECT_TRUE(rejoined) << p->name() << " never averaged with the others after loading\n" << p->tail();
  }

  Peer* live[] = {&p1, &p2, p3.get(), p4.get()};
  const auto deadline = Clock::now() + seconds(120);
  for (Peer* p : live) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    EXPECT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_EQ(final->steps, kMaxSteps) << p->name() << " ran another number of epochs than max_steps\n" << p->tail();
  }
  for (Peer* p : {&p2, p3.get(), p4.get()})
    EXPECT_LE(max_parameter_difference(p1.final_dir(), p->final_dir()), 1e-6) << p1.name() << " vs " << p->name();
}

}  // namespace
}  // namespace loom::swarm
