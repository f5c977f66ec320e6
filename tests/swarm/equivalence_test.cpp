// SPDX-License-Identifier: Apache-2.0
// Equivalence: two peers with batch 128 and target_batch_size 256 follow the
// loss curve of `single` with batch 256 (same task, seed, lr and schedule).
// Tolerance: the mean training loss over each window of 10 epochs is within
// 20% (relative) of single's, and so is the final validation loss. Single
// steps are compared in windows because one step's loss moves by ~30% with
// the mini-batch drawn, and each peer draws its own (sample_salt).
// Run both ways a round can average: allreduce_scaled straight into the
// gradients (the default with ucx), and the sum in a copy divided into them
// (scaled_allreduce = false, the way for collectives without it); and with a
// swarm key, whose sealed records must not change what is trained.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <regex>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

constexpr int64_t kEpochs = 30;
constexpr int64_t kWindow = 10;
constexpr double kTolerance = 0.20;

std::optional<double> final_loss(const std::string& log) {
  static const std::regex re(R"(final loss: ([0-9.eE+-]+) after)");
  std::smatch m;
  if (!std::regex_search(log, m, re)) return std::nullopt;
  return std::stod(m[1]);
}

struct Way {
  const char* name;
  bool scaled;
  bool keyed;
};

class Equivalence : public testing::TestWithParam<Way> {};

TEST_P(Equivalence, TwoPeersFollowTheLossCurveOfSingle) {
  const bool scaled = GetParam().scaled;
  Scratch scratch;
  const std::vector<std::string> trainer = {"trainer.max_steps=" + std::to_string(kEpochs), "trainer.log_every=1",
                                            "trainer.val_every=0", "trainer.checkpoint_every=0", "trainer.seed=1"};
  auto single_sets = trainer;
  single_sets.push_back("trainer.batch_size=256");
  Peer single(scratch, "single", teacher_config(), single_sets, {}, false);
  ASSERT_EQ(single.wait_exit(seconds(90)), 0) << single.tail();

  auto collab = trainer;
  for (const char* s : {"trainer.batch_size=128", "strategy.name=collab", "strategy.options.target_batch_size=256",
                        "strategy.options.listen=127.0.0.1", "strategy.options.min_peers=2",
                        "strategy.options.verbose=true"})
    collab.push_back(s);
  collab.push_back("strategy.options.run_id=" + unique_run_id("equivalence"));
  collab.push_back(std::string("strategy.options.scaled_allreduce=") + (scaled ? "true" : "false"));
  if (GetParam().keyed) {
    const std::string key = scratch.path("swarm.key");
    const auto made = loom::test::run_process({kLoomBinary, "swarm", "keygen", key});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    collab.push_back("strategy.options.swarm_key=" + key);
  }
  Peer a(scratch, "a", teacher_config(), collab, {}, false);
  ASSERT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, "b", teacher_config(), collab, {{"LOOM_INITIAL_PEERS", a.address()}}, false);
  ASSERT_EQ(a.wait_exit(seconds(120)), 0) << a.tail();
  ASSERT_EQ(b.wait_exit(seconds(30)), 0) << b.tail();

  const auto reference = read_metric(single.output_dir(), "train_loss");
  ASSERT_EQ(int64_t(reference.size()), kEpochs);
  const auto ref_final = final_loss(single.log());
  ASSERT_TRUE(ref_final) << single.tail();
  for (Peer* p : {&a, &b}) {
    EXPECT_FALSE(averaged_rounds(p->log()).empty()) << p->tail();
    // The way asked for is the way taken.
    EXPECT_EQ(p->log().find("scaled into the gradients") != std::string::npos, scaled) << p->tail();
    EXPECT_EQ(p->log().find("and a copy of the swarm key file") != std::string::npos, GetParam().keyed) << p->tail();
    const auto curve = read_metric(p->output_dir(), "train_loss");
    ASSERT_EQ(int64_t(curve.size()), kEpochs) << p->name();
    double worst = 0;
    for (int64_t first = 1; first <= kEpochs; first += kWindow) {
      double mine = 0, theirs = 0;
      for (int64_t step = first; step < first + kWindow; ++step) {
        mine += curve.at(step);
        theirs += reference.at(step);
      }
      const double rel = std::fabs(mine - theirs) / theirs;
      worst = std::max(worst, rel);
      EXPECT_LE(rel, kTolerance) << p->name() << ": epochs " << first << "-" << first + kWindow - 1 << ": mean loss "
                                 << mine / kWindow << " vs single's " << theirs / kWindow;
    }
    const auto mine_final = final_loss(p->log());
    ASSERT_TRUE(mine_final) << p->tail();
    EXPECT_LE(std::fabs(*mine_final - *ref_final) / *ref_final, kTolerance)
        << p->name() << ": final validation loss " << *mine_final << " vs single's " << *ref_final;
    std::printf("[ figures  ] %s: worst 10-epoch window %.1f%% from single; final validation loss %.4f vs %.4f\n",
                p->name().c_str(), 100 * worst, *mine_final, *ref_final);
  }
}

INSTANTIATE_TEST_SUITE_P(, Equivalence,
                         testing::Values(Way{"SumThenDivide", false, false}, Way{"ScaledIntoTheGradients", true, false},
                                         Way{"ScaledWithASwarmKey", true, true}),
                         [](const testing::TestParamInfo<Way>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::swarm
