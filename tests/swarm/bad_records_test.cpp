// A misbehaving member publishes foreign, truncated, corrupted and garbage
// progress records into the run's DHT key (loom_swarm_rogue): the peers
// reject each, log it, and train on together.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

TEST(Swarm, ForeignAndMalformedRecordsAreRejectedAndTrainingGoesOn) {
  Scratch scratch;
  const std::string run_id = unique_run_id("rogue");
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + run_id, "strategy.options.min_peers=2"};
  Peer first(scratch, "p1", digits_config(), common);
  ASSERT_TRUE(wait_until([&] { return !first.address().empty(); }, seconds(30))) << first.tail();
  const std::string rogue_binary = (std::filesystem::path(kLoomBinary).parent_path() / "loom_swarm_rogue").string();
  loom::test::Child rogue({rogue_binary, run_id, first.address(), "60"}, {}, scratch.path("rogue.log"));
  Peer second(scratch, "p2", digits_config(), common, {{"LOOM_INITIAL_PEERS", first.address()}});

  for (Peer* p : {&first, &second}) ASSERT_EQ(p->wait_exit(seconds(150)), 0) << p->tail();
  for (Peer* p : {&first, &second}) {
    const std::string log = p->log();
    for (const char* reason : {"record of run 0x", "truncated: ", "bad checksum", "not a Loom swarm record"})
      EXPECT_NE(log.find(std::string("rejected a progress record: ") + reason), std::string::npos)
          << p->name() << " did not log rejecting a record with " << reason << "\n" << p->tail();
    auto final = final_result(log);
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.9) << p->name();
    int with_two = 0;
    for (const auto& round : averaged_rounds(log)) with_two += round.peers == 2;
    EXPECT_GE(with_two, 1) << p->name() << " never averaged with the other peer\n" << p->tail();
  }
}

}  // namespace
}  // namespace loom::swarm
