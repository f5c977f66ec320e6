// SPDX-License-Identifier: Apache-2.0
// A diverged peer heals by loading the swarm's state from a healthy peer
// (honest_mistakes_test.cpp). With nobody left to load it from, it fails:
// it exits non-zero and says why, rather than training on alone and
// contributing nothing. But it waits while any record it holds is younger
// than a minute (Peer::kAloneMs): on a loaded machine every record can be
// older than the DHT's expiry while its peers still run (64-peer run 25).
#include <gtest/gtest.h>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

// After 20 losses every gradient of the rogue task is nan: the peer
// diverges again at every window, however often it heals.
std::vector<std::string> diverging_sets(const std::string& run, int min_peers) {
  return {"trainer.threads=1",
          "trainer.max_steps=100000",
          "trainer.task_library=" LOOM_ROGUE_TASK,
          "trainer.task=rogue",
          "task.mode=nan",
          "task.after=20",
          "strategy.options.listen=127.0.0.1",
          "strategy.options.verbose=true",
          "strategy.options.min_peers=" + std::to_string(min_peers),
          "strategy.options.run_id=" + run};
}

constexpr const char* kAloneWhy = "no other peer is left in the swarm to reload the state from";

// Nobody was ever there to heal from: the trainer's on_nonfinite judges its
// gradients (it stops the run by default); where it skips such steps, the
// peer fails as alone.
struct LoneCase {
  const char* name;
  const char* on_nonfinite;
  const char* said;
};

void PrintTo(const LoneCase& c, std::ostream* os) { *os << c.name; }

class DivergedAlonePeer : public testing::TestWithParam<LoneCase> {};

TEST_P(DivergedAlonePeer, FailsAtOnceSayingWhy) {
  Scratch scratch;
  auto sets = diverging_sets(unique_run_id("diverged-lone"), 1);
  sets.push_back(std::string("trainer.on_nonfinite=") + GetParam().on_nonfinite);
  Peer p(scratch, "lone", digits_config(), sets);
  const int code = p.wait_exit(seconds(90));
  EXPECT_NE(code, -1) << "it trained on alone\n" << p.tail();
  EXPECT_NE(code, 0) << p.tail();
  EXPECT_NE(p.log().find(GetParam().said), std::string::npos) << p.tail();
}

INSTANTIATE_TEST_SUITE_P(
    OnNonfinite, DivergedAlonePeer,
    testing::Values(LoneCase{"Stop", "stop", "the loss or the gradients are not finite"},
                    LoneCase{"SkipStep", "skip_step", kAloneWhy}),
    [](const testing::TestParamInfo<LoneCase>& info) { return std::string(info.param.name); });

TEST(DivergedAlone, APeerThatDivergesAfterItsDonorDiedFailsOnceTheDonorsRecordIsAMinuteOld) {
  Scratch scratch;
  const std::string run = unique_run_id("diverged-left");
  auto healthy = diverging_sets(run, 2);
  healthy.erase(healthy.begin() + 2, healthy.begin() + 6);  // digits itself
  auto donor = std::make_unique<Peer>(scratch, "donor", digits_config(), healthy);
  ASSERT_TRUE(wait_until([&] { return !donor->address().empty(); }, seconds(30))) << donor->tail();
  Peer rogue(scratch, "rogue", digits_config(), diverging_sets(run, 2), {{"LOOM_INITIAL_PEERS", donor->address()}});
  // While its donor lives it heals, again and again, and does not fail.
  ASSERT_TRUE(wait_until([&] { return count_of(rogue.log(), "healed: this peer trains on") >= 2; }, seconds(120)))
      << rogue.tail();
  ASSERT_EQ(rogue.log().find(kAloneWhy), std::string::npos) << rogue.tail();
  donor->kill();
  const auto killed = Clock::now();
  const int code = rogue.wait_exit(seconds(150));
  const double after = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_NE(code, -1) << "it trained on alone\n" << rogue.tail();
  EXPECT_NE(code, 0) << rogue.tail();
  EXPECT_NE(rogue.log().find(kAloneWhy), std::string::npos) << rogue.tail();
  // The donor's last record was at most a few seconds old at the kill: the
  // peer held on for most of the minute before it judged itself alone.
  EXPECT_GE(after, 45.0) << rogue.tail();
  std::printf("[ figures  ] failed %.1f s after its only donor was SIGKILLed (exit %d)\n", after, code);
}

}  // namespace
}  // namespace loom::swarm
