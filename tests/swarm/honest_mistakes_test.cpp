// SPDX-License-Identifier: Apache-2.0
// A swarm that honest mistakes cannot break. Honest digits peers train with
// a broken one beside them: one whose learning rate makes it diverge, one
// whose gradients turn nan or huge (the rogue task, tests/collab/
// rogue_task.cpp), and one that trains another model. The honest peers'
// results are compared with a run of the same honest peers alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "support/subprocess.hpp"
#include "swarm.hpp"

namespace loom::swarm {
namespace {

// Long enough that both runs have converged: at 100 steps digits' accuracy
// still moves by about a point with the trajectory alone (0.9582 against
// 0.9694, the same seeds, one more peer for 20 steps).
constexpr int64_t kSteps = 300;

struct Outcome {
  std::vector<double> accuracy;  // of the honest peers
  double seconds = 0;            // until the last honest peer exited
  std::string final_a, final_b;  // their --dump-final folders
};

std::vector<std::string> common_sets(const std::string& tag, int min_peers) {
  return {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
          "strategy.options.run_id=" + unique_run_id(tag), "strategy.options.min_peers=" + std::to_string(min_peers)};
}

// Two honest peers, and the third (if any) started after them with extra sets.
// Fills *third_log with the third's log once it exited (or was killed).
void run_swarm(const Scratch& scratch, const std::string& tag, const std::vector<std::string>& third_sets,
               Outcome* out, std::string* third_log = nullptr, int* third_exit = nullptr, int64_t steps = 100) {
  const bool with_third = third_log != nullptr;
  auto sets = common_sets(tag, 2);
  sets.push_back("trainer.max_steps=" + std::to_string(steps));
  const auto start = Clock::now();
  Peer a(scratch, tag + "-a", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, tag + "-b", digits_config(), sets, {{"LOOM_INITIAL_PEERS", a.address()}});
  std::unique_ptr<Peer> third;
  if (with_third) {
    auto s = sets;
    s.insert(s.end(), third_sets.begin(), third_sets.end());
    third = std::make_unique<Peer>(scratch, tag + "-third", digits_config(), s,
                                   std::map<std::string, std::string>{{"LOOM_INITIAL_PEERS", a.address()}});
  }
  for (Peer* p : {&a, &b}) {
    ASSERT_EQ(p->wait_exit(seconds(steps + 50)), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_EQ(final->steps, steps) << p->name();
    out->accuracy.push_back(final->accuracy);
  }
  out->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out->final_a = a.final_dir();
  out->final_b = b.final_dir();
  if (with_third) {
    const int code = third->wait_exit(seconds(60));
    if (third_exit) *third_exit = code;
    *third_log = third->log();
  }
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

// How far below the honest peers' accuracy alone they may end beside a
// broken peer. Not 1%: at 300 epochs the trajectory alone moves digits'
// accuracy (359 test images, 0.28% each) by about that much: honest runs
// alone measured 0.9721 to 0.9805, and beside a diverging peer whose every
// contribution had been a sane gradient, 0.9666 (in one CI run).
// A broken peer that gets through costs far more (0.09 when one did).
constexpr double kSpared = 0.02;

// The honest peers end within kSpared accuracy of a run without the broken
// peer, with finite parameters equal to each other (the last epoch averages
// them).
void expect_spared(const Outcome& alone, const Outcome& with_broken, const std::string& third_log) {
  ASSERT_EQ(with_broken.accuracy.size(), 2u);
  std::printf("[ figures  ] accuracy: honest peers alone %.4f and %.4f, beside the broken peer %.4f and %.4f\n",
              alone.accuracy.at(0), alone.accuracy.at(1), with_broken.accuracy[0], with_broken.accuracy[1]);
  for (double acc : with_broken.accuracy)
    EXPECT_GE(acc, mean(alone.accuracy) - kSpared) << "honest peers alone: " << mean(alone.accuracy) << "\nthe broken peer:\n"
                                                << third_log.substr(third_log.size() > 4000 ? third_log.size() - 4000 : 0);
  const double diff = max_parameter_difference(with_broken.final_a, with_broken.final_b);
  EXPECT_LE(diff, 1e-5) << "the honest peers' final parameters differ or are not finite";
}

TEST(HonestMistakes, DivergingPeerHealsAndSparesTheOthers) {
  Scratch scratch;
  Outcome alone, with_diverging;
  run_swarm(scratch, "alone", {}, &alone, nullptr, nullptr, kSteps);
  ASSERT_FALSE(HasFatalFailure());
  std::string diverging_log;
  int code = 0;
  run_swarm(scratch, "diverging", {"trainer.lr=1000"}, &with_diverging, &diverging_log, &code, kSteps);
  ASSERT_FALSE(HasFatalFailure());
  expect_spared(alone, with_diverging, diverging_log);
  EXPECT_NE(code, -1) << "the diverging peer did not exit";
  // It says what happened and heals rather than stopping.
  EXPECT_NE(diverging_log.find("heals rather than stopping"), std::string::npos) << diverging_log;
  EXPECT_NE(diverging_log.find("healed: this peer trains on"), std::string::npos) << diverging_log;
}

struct RogueCase {
  const char* name;
  const char* mode;
  const char* said;  // what the rogue's log says about itself
};

class RoguePeer : public testing::TestWithParam<RogueCase> {};

TEST_P(RoguePeer, CountsZeroAndHeals) {
  Scratch scratch;
  Outcome alone, with_rogue;
  run_swarm(scratch, "alone", {}, &alone, nullptr, nullptr, kSteps);
  ASSERT_FALSE(HasFatalFailure());
  std::string rogue_log;
  run_swarm(scratch, "rogue",
            {"trainer.task_library=" LOOM_ROGUE_TASK, "trainer.task=rogue", std::string("task.mode=") + GetParam().mode,
             "task.after=20"},
            &with_rogue, &rogue_log, nullptr, kSteps);
  ASSERT_FALSE(HasFatalFailure());
  expect_spared(alone, with_rogue, rogue_log);
  EXPECT_NE(rogue_log.find(GetParam().said), std::string::npos) << rogue_log;
  EXPECT_NE(rogue_log.find("heals rather than stopping"), std::string::npos) << rogue_log;
}

INSTANTIATE_TEST_SUITE_P(Modes, RoguePeer,
                         testing::Values(RogueCase{"NanGradients", "nan", "gradients are not finite"},
                                         RogueCase{"HugeGradients", "huge", "times its group's median"}),
                         [](const testing::TestParamInfo<RogueCase>& info) { return std::string(info.param.name); });

TEST(HonestMistakes, PeerWithAnotherModelExits2AndTheOthersTrainOn) {
  Scratch scratch;
  // 300 epochs, as in the issue that found this: long enough that the
  // misfit's start-up (it shares this machine's cores) is not the measure.
  Outcome alone, with_misfit;
  run_swarm(scratch, "alone", {}, &alone, nullptr, nullptr, 300);
  ASSERT_FALSE(HasFatalFailure());
  std::string misfit_log;
  int code = 0;
  run_swarm(scratch, "misfit", {"task.hidden=64", "strategy.options.bootstrap_timeout=10"}, &with_misfit, &misfit_log,
            &code, 300);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(code, 2) << misfit_log;
  EXPECT_NE(misfit_log.find("trains another model than the swarm"), std::string::npos) << misfit_log;
  // The first difference, named: digits' first layer is [hidden, 64].
  EXPECT_NE(misfit_log.find("Float [64, 64] here, Float [128, 64] in the swarm ("), std::string::npos)
      << misfit_log;
  // Told by the peer it joins through, before its DHT node ever started.
  EXPECT_EQ(misfit_log.find("listening on"), std::string::npos) << misfit_log;
  for (double acc : with_misfit.accuracy) EXPECT_GE(acc, mean(alone.accuracy) - kSpared);
  // Time is a benchmark's to judge, not a test's (the target is
  // 1.5x): printed for the record.
  std::printf("[ figures  ] 300 epochs: honest peers alone %.1f s, beside the misfit %.1f s (%.2fx)\n", alone.seconds,
              with_misfit.seconds, with_misfit.seconds / alone.seconds);
}

// A misfit that joins through a DHT node with no state server cannot ask for
// the model before it joins: the peers' records tell it, and it exits 2 all
// the same, while the others train on.
TEST(HonestMistakes, PeerWithAnotherModelFoundFromTheRecordsExits2) {
  Scratch scratch;
  auto sets = common_sets("misfit-dht", 2);
  // Long enough that the honest peers still train while the misfit starts,
  // reads their records and holds its verdict for kMisfitConfirmMs: at 100
  // steps they finished in under 4 s once matchmaking stopped polling, and
  // the misfit, finding nobody, timed out instead (4 of 6 runs).
  constexpr int kSteps = 600;
  sets.push_back("trainer.max_steps=" + std::to_string(kSteps));
  Peer a(scratch, "a", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, "b", digits_config(), sets, {{"LOOM_INITIAL_PEERS", a.address()}});
  const std::string run_id = sets[2].substr(sets[2].find('=') + 1);
  const std::string rogue_log = scratch.path("rogue.log");
  loom::test::Child rogue({rogue_binary(), run_id, a.address(), "120"}, {}, rogue_log);
  const std::string rogue_address = rogue_dht_address(rogue_log, seconds(30));
  ASSERT_FALSE(rogue_address.empty()) << read_text(rogue_log);
  auto misfit_sets = sets;
  misfit_sets.push_back("task.hidden=64");
  misfit_sets.push_back("strategy.options.bootstrap_timeout=10");
  Peer misfit(scratch, "misfit", digits_config(), misfit_sets, {{"LOOM_INITIAL_PEERS", rogue_address}});
  EXPECT_EQ(misfit.wait_exit(seconds(60)), 2) << misfit.tail();
  const std::string misfit_log = misfit.log();
  EXPECT_NE(misfit_log.find("could not ask " + rogue_address + " which model the swarm trains"), std::string::npos)
      << misfit_log;
  EXPECT_NE(misfit_log.find("Float [64, 64] here, Float [128, 64] in the swarm ("), std::string::npos) << misfit_log;
  for (Peer* p : {&a, &b}) {
    ASSERT_EQ(p->wait_exit(seconds(150)), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_EQ(final->steps, kSteps) << p->name();
  }
}

}  // namespace
}  // namespace loom::swarm
