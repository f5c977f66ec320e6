// A swarm with a key (issue 13): peers that hold `loom swarm keygen`'s key
// train together; a peer without it, or with another key, never sees them.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>

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
  // Outsiders: no key, another key. Each waits for a second peer in vain.
  const std::vector<std::string> outsider = {"strategy.options.bootstrap_timeout=8"};
  auto no_key_sets = with(outsider);
  Peer no_key(scratch, "no-key", digits_config(), no_key_sets, {{"LOOM_INITIAL_PEERS", a.address()}});
  auto other_sets = with(outsider);
  other_sets.push_back("strategy.options.swarm_key=" + other_key);
  Peer other(scratch, "other-key", digits_config(), other_sets, {{"LOOM_INITIAL_PEERS", a.address()}});

  for (Peer* p : {&no_key, &other}) {
    EXPECT_NE(p->wait_exit(seconds(60)), 0) << p->tail();
    EXPECT_NE(p->log().find("only 1 of min_peers = 2 peers"), std::string::npos) << p->name() << "\n" << p->tail();
    EXPECT_TRUE(averaged_rounds(p->log()).empty()) << p->name() << " averaged with someone";
  }
  EXPECT_NE(no_key.log().find("This swarm is open"), std::string::npos) << no_key.tail();
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
