// SPDX-License-Identifier: Apache-2.0
// A swarm with a key (issue 13): peers that hold `loom swarm keygen`'s key
// train together; a peer without it, or with another key, never sees them.
#include <gtest/gtest.h>

#include <sys/stat.h>


#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

std::string keygen(const Scratch& scratch, const std::string& name) {
  const std::string path = scratch.path(name);
  const auto r = loom::test::run_process({kLoomBinary, "swarm", "keygen", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote a new swarm key to " + path + " (mode 0600)"), std::string::npos) << r.out;
  return path;
}

TEST(SwarmKey, KeygenWritesMode0600AndNeverOverwrites) {
  Scratch scratch;
  const std::string path = keygen(scratch, "swarm.key");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string before = read_text(path);
  const auto again = loom::test::run_process({kLoomBinary, "swarm", "keygen", path});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("never overwritten"), std::string::npos) << again.err;
  EXPECT_EQ(read_text(path), before);
  const auto usage = loom::test::run_process({kLoomBinary, "swarm", "keygen"});
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
}

TEST(SwarmKey, OnlyKeyHoldersTrainTogether) {
  Scratch scratch;
  const std::string key = keygen(scratch, "swarm.key"), other_key = keygen(scratch, "other.key");
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("keyed"),
                                           "strategy.options.min_peers=2", "trainer.max_steps=100"};
  auto with = [&](std::vector<std::string> extra) {
    auto s = common;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  Peer a(scratch, "a", digits_config(), with({"strategy.options.swarm_key=" + key}));
  ASSERT_TRUE(wait_until([&] { return !a.address().empty(); }, seconds(30))) << a.tail();
  Peer b(scratch, "b", digits_config(), common, {{"LOOM_INITIAL_PEERS", a.address()}, {"LOOM_SWARM_KEY", key}});
  // Outsiders. One without the key asks a for the swarm's model before it
  // joins, is refused, and exits 2 saying what it lacks. One with another key
  // joins through a DHT node that has no state server (nobody to ask): it
  // never finds the swarm's records and waits for a second peer in vain.
  Peer no_key(scratch, "no-key", digits_config(), common, {{"LOOM_INITIAL_PEERS", a.address()}});
  const std::string rogue_log = scratch.path("rogue.log");
  const std::string run_id = common[2].substr(common[2].find('=') + 1);
  loom::test::Child rogue({rogue_binary(), run_id, a.address(), "120"}, {}, rogue_log);
  const std::string rogue_address = rogue_dht_address(rogue_log, seconds(30));
  ASSERT_FALSE(rogue_address.empty()) << read_text(rogue_log);
  Peer other(scratch, "other-key", digits_config(),
             with({"strategy.options.bootstrap_timeout=8", "strategy.options.swarm_key=" + other_key}),
             {{"LOOM_INITIAL_PEERS", rogue_address}});

  EXPECT_EQ(no_key.wait_exit(seconds(60)), 2) << no_key.tail();
  EXPECT_NE(no_key.log().find("has a swarm key and this peer holds none"), std::string::npos) << no_key.tail();
  EXPECT_NE(other.wait_exit(seconds(60)), 0) << other.tail();
  EXPECT_NE(other.log().find("only 1 of min_peers = 2 peers"), std::string::npos) << other.tail();
  for (Peer* p : {&no_key, &other})
    EXPECT_TRUE(averaged_rounds(p->log()).empty()) << p->name() << " averaged with someone";
  for (Peer* p : {&a, &b}) {
    ASSERT_EQ(p->wait_exit(seconds(150)), 0) << p->tail();
    const std::string log = p->log();
    auto final = final_result(log);
    ASSERT_TRUE(final) << p->tail();
    EXPECT_EQ(final->steps, 100) << p->name();
    EXPECT_GE(final->accuracy, 0.9) << p->name();
    int with_two = 0;
    for (const auto& round : averaged_rounds(log)) {
      EXPECT_LE(round.peers, 2) << p->name() << " averaged with an outsider";
      with_two += round.peers == 2;
    }
    EXPECT_GE(with_two, 50) << p->name() << " seldom averaged with the other key holder\n" << p->tail();
  }
  // The outsiders' requests to a's state server (asking for the model
  // before they join) were refused: one line says so, the next refusal from
  // the same address within the minute is counted, not logged.
  const std::string a_log = a.log();
  size_t refusals = 0;
  for (const char* said : {"asked without the swarm key", "does not hold this swarm's key"})
    for (size_t at = a_log.find(said); at != std::string::npos; at = a_log.find(said, at + 1)) ++refusals;
  EXPECT_EQ(refusals, 1u) << a.tail();
  // The join message names the key file, never the key.
  const std::string key_text = read_text(key);
  const std::string hex = key_text.substr(key_text.find('\n') + 1, 64);
  EXPECT_NE(a.log().find("and a copy of the swarm key file " + key), std::string::npos) << a.tail();
  for (Peer* p : {&a, &b}) EXPECT_EQ(p->log().find(hex), std::string::npos) << p->name() << " printed the key";
}

// A peer given a key that joins an open swarm, and one whose key is not
// the swarm's, each exit 2 naming the mismatch; the open peer says its
// swarm is open.
TEST(SwarmKey, AKeyThatIsNotTheSwarmsExits2NamingIt) {
  Scratch scratch;
  const std::string key = keygen(scratch, "swarm.key"), other_key = keygen(scratch, "other.key");
  const std::vector<std::string> sets = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                         "strategy.options.run_id=" + unique_run_id("key-mismatch"),
                                         "trainer.max_steps=1000000"};
  Peer open(scratch, "open", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !open.address().empty(); }, seconds(30))) << open.tail();
  EXPECT_NE(open.log().find("This swarm is open"), std::string::npos) << open.tail();
  Peer keyed(scratch, "keyed", digits_config(), sets, {{"LOOM_INITIAL_PEERS", open.address()}, {"LOOM_SWARM_KEY", key}});
  EXPECT_EQ(keyed.wait_exit(seconds(60)), 2) << keyed.tail();
  EXPECT_NE(keyed.log().find("is open (it has no swarm key), and this peer has swarm_key"), std::string::npos)
      << keyed.tail();

  auto keyed_sets = sets;
  keyed_sets.push_back("strategy.options.swarm_key=" + key);
  Peer holder(scratch, "holder", digits_config(), keyed_sets);
  ASSERT_TRUE(wait_until([&] { return !holder.address().empty(); }, seconds(30))) << holder.tail();
  Peer wrong(scratch, "wrong", digits_config(), sets,
             {{"LOOM_INITIAL_PEERS", holder.address()}, {"LOOM_SWARM_KEY", other_key}});
  EXPECT_EQ(wrong.wait_exit(seconds(60)), 2) << wrong.tail();
  EXPECT_NE(wrong.log().find("is not the one of initial peer"), std::string::npos) << wrong.tail();
}

// A key holder that joins a running swarm loads the state from a donor
// over the encrypted stream (both prove the key first).
TEST(SwarmKey, ALateKeyHolderLoadsTheStateOverTheEncryptedStream) {
  Scratch scratch;
  const std::string key = keygen(scratch, "swarm.key");
  const std::vector<std::string> sets = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                         "strategy.options.run_id=" + unique_run_id("keyed-late"),
                                         "strategy.options.swarm_key=" + key, "trainer.max_steps=1000000"};
  Peer a(scratch, "a", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return a.log().find("step 20/") != std::string::npos; }, seconds(60))) << a.tail();
  Peer late(scratch, "late", digits_config(), sets, {{"LOOM_INITIAL_PEERS", a.address()}});
  ASSERT_TRUE(wait_until([&] { return late.log().find("loaded the state of epoch") != std::string::npos; }, seconds(90)))
      << late.tail() << "\n" << a.tail();
  EXPECT_EQ(a.log().find("without the swarm key"), std::string::npos) << a.tail();
}

}  // namespace
}  // namespace loom::swarm
