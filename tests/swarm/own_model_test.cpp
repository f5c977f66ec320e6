// SPDX-License-Identifier: Apache-2.0
// Three collab peers train a user's TorchScript model with BatchNorm (the
// digits CNN of examples/own-model): they reach the accuracy of one process
// with the swarm's batch, and the last state averaging leaves every peer
// with the same parameters and the same BatchNorm statistics; under local
// updates, each averaged round's mean of the statistics does.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "swarm.hpp"
#include "test_paths.hpp"
#include "train/own_model.hpp"

namespace loom::swarm {
namespace {

// 100 epochs of 192 samples: three peers of 64, or one process of 192.
std::string cnn_config(const std::string& models, const std::string& path, const std::string& extra) {
  return loom::test::write_config(
      path, loom::test::digits_cnn_config(models, "max_steps = 100\noptimizer = \"adamw\"\nlr = 0.003\n"
                                                  "schedule = \"cosine\"\nseed = 1\nlog_every = 20\nthreads = 1\n" +
                                                      extra));
}

TEST(Swarm, ThreePeersTrainAUsersCnnToTheAccuracyOfOneProcessWithEqualBuffers) {
  std::string why;
  const std::string models = loom::test::exported_models(&why);
  ASSERT_FALSE(models.empty()) << why;
  Scratch scratch;
  auto single = loom::test::run_process(
      {kLoomBinary, "train", cnn_config(models, scratch.path("single.toml"), "batch_size = 192\n"), "--set",
       "trainer.output_dir=" + scratch.path("single")},
      loom::test::kNoJob, seconds(240));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const double single_accuracy = loom::test::final_metric(single.out, "accuracy");

  const std::string cfg = cnn_config(models, scratch.path("collab.toml"),
                                     "batch_size = 64\n[strategy]\nname = \"collab\"\n[strategy.options]\n"
                                     "target_batch_size = 192\nmatchmaking_time = 1.0\naveraging_timeout = 10.0\n"
                                     "average_state_every = 5\n");
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("own-cnn"),
                                           "strategy.options.min_peers=3"};
  Peer first(scratch, "p1", cfg, common);
  ASSERT_TRUE(wait_until([&] { return !first.address().empty(); }, seconds(30))) << first.tail();
  Peer second(scratch, "p2", cfg, common, {{"LOOM_INITIAL_PEERS", first.address()}});
  Peer third(scratch, "p3", cfg, common, {{"LOOM_INITIAL_PEERS", first.address()}});
  Peer* peers[] = {&first, &second, &third};
  const auto deadline = Clock::now() + seconds(200);
  for (Peer* p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
  }
  for (Peer* p : peers) {
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_NEAR(final->accuracy, single_accuracy, 0.01) << p->name() << " against one process";
    EXPECT_NE(p->log().find("averaged the parameters and 4 buffers"), std::string::npos)
        << p->name() << " never averaged the BatchNorm statistics\n" << p->tail();
  }
  for (Peer* p : {&second, &third}) {
    EXPECT_LE(max_parameter_difference(first.final_dir(), p->final_dir()), 1e-6) << p->name();
    EXPECT_LE(max_parameter_difference(first.final_dir(), p->final_dir(), "buffers"), 1e-6) << p->name();
  }
}

// Under local updates no state averaging runs: after each averaged round
// the group takes the mean of the BatchNorm statistics (no optimizer moves
// them), so the peers end with the same buffers as well as the same anchor.
TEST(Swarm, UnderLocalUpdatesThreePeersEndWithTheSameBatchNormStatistics) {
  std::string why;
  const std::string models = loom::test::exported_models(&why);
  ASSERT_FALSE(models.empty()) << why;
  Scratch scratch;
  const std::string cfg = cnn_config(models, scratch.path("local.toml"),
                                     "batch_size = 64\n[strategy]\nname = \"collab\"\n[strategy.options]\n"
                                     "target_batch_size = 192\nmatchmaking_time = 1.0\naveraging_timeout = 10.0\n"
                                     "local_updates = true\nlocal_steps = 10\n");
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("own-cnn-local"),
                                           "strategy.options.min_peers=3"};
  Peer first(scratch, "p1", cfg, common);
  ASSERT_TRUE(wait_until([&] { return !first.address().empty(); }, seconds(30))) << first.tail();
  Peer second(scratch, "p2", cfg, common, {{"LOOM_INITIAL_PEERS", first.address()}});
  Peer third(scratch, "p3", cfg, common, {{"LOOM_INITIAL_PEERS", first.address()}});
  Peer* peers[] = {&first, &second, &third};
  const auto deadline = Clock::now() + seconds(200);
  size_t averaged = 0;
  for (Peer* p : peers) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.9) << p->name();
    averaged += count_of(p->log(), "averaged the model's 4 buffers with 3 of 3 peers");
  }
  const double params = max_parameter_difference(first.final_dir(), second.final_dir()),
               buffers = std::max(max_parameter_difference(first.final_dir(), second.final_dir(), "buffers"),
                                  max_parameter_difference(first.final_dir(), third.final_dir(), "buffers"));
  std::printf("[ figures  ] local updates with BatchNorm: %zu buffer averagings over 3 peers' 10 outer steps; "
              "parameters apart by %.3g, buffers by %.3g\n", averaged, params, buffers);
  EXPECT_GE(averaged, 3u * 8) << "the buffers were rarely averaged";
  EXPECT_EQ(params, 0.0);
  EXPECT_LE(buffers, 1e-6) << "the peers' BatchNorm statistics drifted apart";
}

}  // namespace
}  // namespace loom::swarm
