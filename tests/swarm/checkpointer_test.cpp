// SPDX-License-Identifier: Apache-2.0
// role = "checkpointer": a peer that never trains keeps the swarm's state on
// disk and serves it. After every trainer has left (SIGTERM), a new peer
// loads the state from it, and its checkpoint file resumes the run with
// loom train --resume.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <regex>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

// The epochs of "checkpointer: kept the swarm's state of epoch E" lines.
std::vector<int64_t> kept_epochs(const std::string& log) {
  std::vector<int64_t> out;
  static const std::regex re("checkpointer: kept the swarm's state of epoch ([0-9]+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoll((*it)[1].str()));
  return out;
}

TEST(Checkpointer, KeepsAndServesTheSwarmsStateSoTheRunGoesOnAfterEveryTrainerLeft) {
  Scratch scratch;
  const std::string run_id = unique_run_id("ckpt");
  const std::string ckpt_dir = scratch.path("kept");
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.run_id=" + run_id,
                                           "strategy.options.verbose=true", "trainer.max_steps=100000",
                                           "strategy.options.average_state_every=5"};
  std::vector<std::string> trainers = common;
  trainers.push_back("strategy.options.min_peers=2");
  auto p1 = std::make_unique<Peer>(scratch, "p1", digits_config(), trainers, std::map<std::string, std::string>{}, false);
  ASSERT_TRUE(wait_until([&] { return !p1->address().empty(); }, seconds(30))) << p1->tail();
  const std::map<std::string, std::string> join = {{"LOOM_INITIAL_PEERS", p1->address()}};
  auto p2 = std::make_unique<Peer>(scratch, "p2", digits_config(), trainers, join, false);
  std::vector<std::string> keeper = common;
  keeper.push_back("strategy.options.role=checkpointer");
  keeper.push_back("strategy.options.checkpoint_dir=" + ckpt_dir);
  keeper.push_back("strategy.options.checkpoint_every=10");
  Peer ck(scratch, "ck", digits_config(), keeper, join, false);
  ASSERT_TRUE(wait_until([&] { return kept_epochs(ck.log()).size() >= 2; }, seconds(120))) << ck.tail();
  // It never trains: no round of its own, and the trainers never group with it.
  EXPECT_TRUE(averaged_rounds(ck.log()).empty()) << ck.tail();
  for (const auto& a : averaged_rounds(p1->log())) EXPECT_EQ(a.peers, 2) << "epoch " << a.epoch;

  // Every trainer leaves (with its goodbye); what the checkpointer kept is
  // all that is left. (A killed trainer's record would stay up to its 10 s
  // expiry, and a joiner would wait for its epoch until then.)
  for (auto* p : {p1.get(), p2.get()}) {
    p->signal(SIGTERM);
    EXPECT_EQ(p->wait_exit(seconds(30)), 0) << p->tail();
  }
  const int64_t kept = kept_epochs(ck.log()).back();
  ASSERT_TRUE(std::filesystem::exists(ckpt_dir + "/checkpoint.pt"));
  EXPECT_FALSE(std::filesystem::exists(ckpt_dir + "/checkpoint.pt.tmp"));

  // A new trainer joins through the checkpointer and loads from it.
  std::vector<std::string> joiner = common;
  joiner[3] = "trainer.max_steps=" + std::to_string(kept + 20);
  Peer p3(scratch, "p3", digits_config(), joiner, {{"LOOM_INITIAL_PEERS", ck.address()}}, false);
  ASSERT_EQ(p3.wait_exit(seconds(120)), 0) << p3.tail();
  const auto loaded = loaded_states(p3.log());
  ASSERT_FALSE(loaded.empty()) << "the new trainer did not load the checkpointer's state\n" << p3.tail();
  EXPECT_GE(loaded.front().epoch, kept) << p3.tail();
  auto result = final_result(p3.log());
  ASSERT_TRUE(result) << p3.tail();
  EXPECT_EQ(result->steps, kept + 20);
  EXPECT_GT(result->accuracy, 0.85) << p3.tail();

  // Its file resumes the run alone: loom train --resume with that folder.
  ck.kill();
  const int64_t on_disk = kept_epochs(ck.log()).back();
  auto resumed = loom::test::run_process(
      {kLoomBinary, "train", digits_config(), "--resume", "--set", "trainer.output_dir=" + ckpt_dir, "--set",
       "strategy.options.listen=127.0.0.1", "--set", "strategy.options.run_id=" + unique_run_id("ckpt-again"), "--set",
       "trainer.max_steps=" + std::to_string(on_disk + 10)},
      {{"LOOM_INITIAL_PEERS", ""}}, seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const std::string said = resumed.out + resumed.err;
  EXPECT_NE(said.find("epoch " + std::to_string(on_disk) + ","), std::string::npos)
      << "it did not start at the kept epoch " << on_disk << "\n" << said.substr(0, 3000);
  auto again = final_result(said);
  ASSERT_TRUE(again) << said.substr(said.size() > 3000 ? said.size() - 3000 : 0);
  EXPECT_EQ(again->steps, on_disk + 10);
  std::printf("[ figures ] the checkpointer kept %zu states (last: epoch %lld); a new trainer loaded epoch %lld from "
              "it and ended at %.4f accuracy; the file resumed the run at epoch %lld\n",
              kept_epochs(ck.log()).size(), static_cast<long long>(on_disk),
              static_cast<long long>(loaded.front().epoch), result->accuracy, static_cast<long long>(on_disk));
}

TEST(Checkpointer, WithoutACheckpointDirItIsAConfigurationError) {
  Scratch scratch;
  auto r = loom::test::run_process(
      {kLoomBinary, "train", digits_config(), "--set", "trainer.output_dir=" + scratch.path("out"), "--set",
       "strategy.options.listen=127.0.0.1", "--set", "strategy.options.role=checkpointer"},
      {{"LOOM_INITIAL_PEERS", ""}}, seconds(60));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("option checkpoint_dir is required with role = \"checkpointer\""), std::string::npos) << r.err;
  r = loom::test::run_process({kLoomBinary, "train", digits_config(), "--set", "trainer.output_dir=" + scratch.path("out"),
                               "--set", "strategy.options.listen=127.0.0.1", "--set", "strategy.options.role=keeper"},
                              {{"LOOM_INITIAL_PEERS", ""}}, seconds(60));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("option role = 'keeper' is not valid; use \"trainer\" or \"checkpointer\""), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace loom::swarm
