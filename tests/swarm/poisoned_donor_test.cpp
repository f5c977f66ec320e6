// SPDX-License-Identifier: Apache-2.0
// A donor that serves a poisoned state (the honest state of a
// state-averaging epoch with its first tensor negated,
// tests/collab/rogue_poison.cpp) while it claims the parameters' hash the
// honest peers published: a joiner restores it, finds that its parameters
// do not match what the other peers published for that epoch, refuses it,
// and loads an honest donor's state instead.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "support/subprocess.hpp"
#include "swarm.hpp"

namespace loom::swarm {
namespace {

TEST(Swarm, APoisonedDonorIsRefusedAndTheJoinerLoadsAnHonestState) {
  Scratch scratch;
  const std::string run_id = unique_run_id("poison");
  // Slow epochs and sparse state averaging: the rogue's record keeps up
  // with the honest peers' epoch, so it ranks with them as a donor.
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + run_id, "trainer.max_steps=80",
                                           "strategy.options.target_batch_size=2048",
                                           "strategy.options.average_state_every=10",
                                           "strategy.options.load_state_timeout=60"};
  auto pair = common;
  pair.push_back("strategy.options.min_peers=2");
  Peer a(scratch, "a", digits_config(), pair);
  ASSERT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, "b", digits_config(), pair, {{"LOOM_INITIAL_PEERS", a.address()}});
  const std::string rogue_log = scratch.path("rogue-poison.log");
  loom::test::Child rogue({rogue_binary(), "--poison", run_id, a.address(), "300", "10"}, {}, rogue_log);
  ASSERT_TRUE(wait_until([&] { return read_text(rogue_log).find("rogue poisoned") != std::string::npos; }, seconds(90)))
      << read_text(rogue_log) << a.tail() << b.tail();
  const std::string rogue_id = rogue_peer_id(rogue_log);
  ASSERT_FALSE(rogue_id.empty()) << read_text(rogue_log);

  // Slow readers keep the honest donors busy, so a joiner asks the idle
  // rogue first among donors at one epoch. Which donor it asks first is
  // still its own choice (epochs move): a joiner that loaded an honest
  // state without asking the rogue is killed and another one started.
  std::vector<std::unique_ptr<loom::test::Child>> readers;
  for (Peer* p : {&a, &b})
    readers.push_back(std::make_unique<loom::test::Child>(
        std::vector<std::string>{rogue_binary(), "--run", run_id, "--slow-readers", "2", state_address(*p), "200"},
        std::map<std::string, std::string>{}, scratch.path("readers-" + p->name() + ".log")));
  // One donor after another (load_donors_at_once = 1), best first: asked
  // at once, an honest donor may win the race and the rogue go unasked.
  auto joining = common;
  joining.push_back("strategy.options.load_donors_at_once=1");
  std::unique_ptr<Peer> joiner;
  bool refused = false;
  int joiners = 0;
  while (!refused && joiners < 10 && a.running()) {
    joiner = std::make_unique<Peer>(scratch, "joiner" + std::to_string(++joiners), digits_config(), joining,
                                    std::map<std::string, std::string>{{"LOOM_INITIAL_PEERS", a.address()}});
    wait_until(
        [&] {
          const std::string log = joiner->log();
          refused = log.find("a poisoned or damaged state") != std::string::npos;
          return refused || log.find("loaded the state of epoch") != std::string::npos || !joiner->running();
        },
        seconds(60));
    if (!refused) joiner->kill();
  }
  ASSERT_TRUE(refused) << joiners << " joiners never asked the rogue\n" << (joiner ? joiner->tail() : "")
                       << read_text(rogue_log);
  const std::string log = joiner->log();
  const auto at = log.find("from peer " + rogue_id + " does not match the parameters' hash");
  ASSERT_NE(at, std::string::npos) << "the refusal does not name the rogue (" << rogue_id << ")\n" << joiner->tail();
  // It refused the state of an epoch whose honest state the rogue served
  // poisoned: only the poison told them apart.
  const auto of = log.rfind("the state of epoch ", at);
  ASSERT_NE(of, std::string::npos);
  const std::string epoch = log.substr(of + 19, log.find(' ', of + 19) - of - 19);
  EXPECT_NE(read_text(rogue_log).find("rogue poisoned the state of epoch " + epoch + "\n"), std::string::npos)
      << "epoch " << epoch << "\n" << read_text(rogue_log);

  for (Peer* p : {&a, &b, joiner.get()}) ASSERT_EQ(p->wait_exit(seconds(180)), 0) << p->tail();
  const std::string done = joiner->log();
  const auto loaded = loaded_states(done);
  ASSERT_FALSE(loaded.empty()) << "the joiner never loaded an honest state\n" << joiner->tail();
  EXPECT_EQ(done.find("from peer " + rogue_id + " ("), std::string::npos) << "it loaded the rogue's state\n"
                                                                          << joiner->tail();
  EXPECT_NE(done.find("its parameters match the hash most peers published"), std::string::npos) << joiner->tail();
  EXPECT_EQ(done.find("taken on trust"), std::string::npos) << joiner->tail();
  for (Peer* p : {&a, &b, joiner.get()}) {
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.9) << p->name();
  }
  std::printf("[ figures  ] joiner %d refused the poisoned donor, then loaded the state of epoch %lld in %.3f s\n",
              joiners, static_cast<long long>(loaded.front().epoch), loaded.front().seconds);
}

}  // namespace
}  // namespace loom::swarm
