// SPDX-License-Identifier: Apache-2.0
// Misbehaving members (loom_swarm_rogue): one publishes foreign, truncated,
// corrupted and garbage progress records into the run's DHT key, another
// peer's record signed by its own key and a peer's old record replayed, and
// the peers reject each, log it, and train on together; another serves a state
// with a wrong checksum, and a joiner rejects it, logs it, and loads the
// state from an honest donor.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "support/subprocess.hpp"
#include "swarm.hpp"

namespace loom::swarm {
namespace {

TEST(Swarm, ForeignAndMalformedRecordsAreRejectedAndTrainingGoesOn) {
  Scratch scratch;
  const std::string run_id = unique_run_id("rogue");
  // 400 steps: the rogue replays a record once its peer has said something
  // newer (1.5 s on), and 100 digits steps could end before that.
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + run_id, "strategy.options.min_peers=2",
                                           "trainer.max_steps=400"};
  Peer first(scratch, "p1", digits_config(), common);
  ASSERT_TRUE(wait_until([&] { return !first.address().empty(); }, seconds(30))) << first.tail();
  loom::test::Child rogue({rogue_binary(), run_id, first.address(), "60"}, {}, scratch.path("rogue.log"));
  Peer second(scratch, "p2", digits_config(), common, {{"LOOM_INITIAL_PEERS", first.address()}});

  for (Peer* p : {&first, &second}) ASSERT_EQ(p->wait_exit(seconds(150)), 0) << p->tail();
  auto occurrences = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  int replays = 0;  // the rogue replays one peer's first record: the other refuses it, and says so
  for (Peer* p : {&first, &second}) {
    const std::string log = p->log();
    for (const char* reason : {"record of run 0x", "truncated: ", "bad checksum", "not a Loom swarm record"})
      EXPECT_NE(log.find(std::string("rejected a progress record: ") + reason), std::string::npos)
          << p->name() << " did not log rejecting a record with " << reason << "\n" << p->tail();
    // The rogue re-signs one peer's record under its own key: both refuse it,
    // said at most once a minute (the run is shorter than two).
    const int forged = occurrences(log, "(forged)");
    EXPECT_GE(forged, 1) << p->name() << "\n" << p->tail();
    EXPECT_LE(forged, 2) << p->name() << "\n" << p->tail();
    // Refused as an older copy while a node could still hold one, as a
    // replay after that (the run may end before); each said once a minute.
    const int older = occurrences(log, "refused an older copy of a progress record of peer"),
              replayed = occurrences(log, "someone puts old records again (a replay)");
    replays += older + replayed;
    EXPECT_LE(older, 2) << p->name();
    EXPECT_LE(replayed, 2) << p->name();
    auto final = final_result(log);
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.9) << p->name();
    int with_two = 0;
    for (const auto& round : averaged_rounds(log)) with_two += round.peers == 2;
    EXPECT_GE(with_two, 1) << p->name() << " never averaged with the other peer\n" << p->tail();
  }
  EXPECT_GE(replays, 1) << "no peer logged refusing the replayed record\n" << first.tail() << second.tail();
}

TEST(Swarm, DonorWithAWrongChecksumIsRejectedAndTheJoinerLoadsFromAnother) {
  Scratch scratch;
  const std::string run_id = unique_run_id("rogue-donor");
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + run_id, "trainer.max_steps=80",
                                           "strategy.options.matchmaking_time=0.5"};
  // The rogue starts the swarm; the honest peer joins through it and trains
  // (alone: the rogue never averages).
  const std::string rogue_log = scratch.path("rogue-donor.log");
  loom::test::Child rogue({rogue_binary(), "--donor", run_id, "-", "120"}, {}, rogue_log);
  const std::string rogue_address = rogue_dht_address(rogue_log, seconds(20));
  ASSERT_FALSE(rogue_address.empty()) << read_text(rogue_log);
  Peer honest(scratch, "honest", digits_config(), common, {{"LOOM_INITIAL_PEERS", rogue_address}});
  // Once the rogue copies an epoch of 3 or more, freeze the honest peer until
  // its record is stale: the rogue is then the joiner's only donor.
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string text = read_text(rogue_log);
        auto at = text.rfind("rogue epoch ");
        return at != std::string::npos && std::atoll(text.c_str() + at + 12) >= 3;
      },
      seconds(60)))
      << read_text(rogue_log) << honest.tail();
  const auto stopped = Clock::now();
  honest.signal(SIGSTOP);
  std::this_thread::sleep_for(seconds(6));
  Peer joiner(scratch, "joiner", digits_config(), common, {{"LOOM_INITIAL_PEERS", rogue_address}});
  const bool rejected = wait_until([&] { return joiner.log().find("CRC mismatch") != std::string::npos; }, seconds(30));
  honest.signal(SIGCONT);
  ASSERT_TRUE(rejected) << "the joiner never logged rejecting the rogue's state\n"
                        << joiner.tail() << read_text(rogue_log);
  const std::string rogue_id = rogue_peer_id(rogue_log);
  ASSERT_FALSE(rogue_id.empty()) << read_text(rogue_log);
  EXPECT_NE(joiner.log().find("state download from donor " + rogue_id), std::string::npos) << joiner.tail();

  const auto resumed = Clock::now();
  for (Peer* p : {&honest, &joiner}) ASSERT_EQ(p->wait_exit(seconds(120)), 0) << p->tail();
  std::printf("[ figures  ] honest peer stopped at %.1f s, resumed at %.1f s; both done at %.1f s\n",
              std::chrono::duration<double>(stopped - honest.started()).count(),
              std::chrono::duration<double>(resumed - honest.started()).count(),
              std::chrono::duration<double>(Clock::now() - honest.started()).count());
  const auto loaded = loaded_states(joiner.log());
  ASSERT_FALSE(loaded.empty()) << "the joiner never loaded the state from the honest peer\n" << joiner.tail();
  EXPECT_GE(loaded.front().epoch, 3);
  for (Peer* p : {&honest, &joiner}) {
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.85) << p->name();  // 80 epochs
    int with_two = 0;
    for (const auto& round : averaged_rounds(p->log())) with_two += round.peers == 2;
    EXPECT_GE(with_two, 1) << p->name() << " never averaged with the other peer\n" << p->tail();
  }
}

}  // namespace
}  // namespace loom::swarm
