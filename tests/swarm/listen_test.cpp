// SPDX-License-Identifier: Apache-2.0
// listen confines every socket of a collab peer: with listen = 127.0.0.1, two
// peers training together hold no listening socket (TCP or UDP) on any other
// address (the DHT node, the state server and UCX's TCP listener included);
// a listen value that is no address of this machine ends the peer with exit
// code 2 and says why.
#include <gtest/gtest.h>

#include "support/listening.hpp"
#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

TEST(Swarm, ListenOnLoopbackBindsEverySocketOfAPeerThere) {
  Scratch scratch;
  const std::vector<std::string> common = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                           "strategy.options.run_id=" + unique_run_id("listen"),
                                           "strategy.options.min_peers=2",
                                           // the second peer may take 30 s to start on a loaded machine
                                           "strategy.options.bootstrap_timeout=120"};
  Peer first(scratch, "p1", digits_config(), common);
  ASSERT_TRUE(wait_until([&] { return !first.address().empty(); }, seconds(30))) << first.tail();
  Peer second(scratch, "p2", digits_config(), common, {{"LOOM_INITIAL_PEERS", first.address()}});
  // Once both have averaged, every socket they will hold is open.
  ASSERT_TRUE(wait_until([&] { return !averaged_rounds(first.log()).empty() && !averaged_rounds(second.log()).empty(); },
                         seconds(90)))
      << first.tail() << "\n" << second.tail();
  ASSERT_TRUE(first.running() && second.running()) << first.tail() << "\n" << second.tail();
  std::string why;
  const auto sockets = loom::test::listening_sockets({first.pid(), second.pid()}, &why);
  ASSERT_TRUE(why.empty()) << why;
  int per_peer[2] = {0, 0};
  for (const auto& s : sockets) {
    per_peer[s.pid == second.pid()] += 1;
    EXPECT_TRUE(loom::test::is_loopback(s.host)) << "bound beyond 127.0.0.1: " << s.line;
    std::printf("[ sockets  ] %s\n", s.line.c_str());
  }
  // The DHT node (UDP) and the state server (TCP) at least: ss did see them.
  EXPECT_GE(per_peer[0], 2) << "ss showed too few sockets of " << first.pid();
  EXPECT_GE(per_peer[1], 2) << "ss showed too few sockets of " << second.pid();
}

TEST(Swarm, ListenThatIsNoAddressOfThisMachineExitsWithCode2) {
  Scratch scratch;
  struct Case {
    std::string value;
    std::string said;
  };
  const Case cases[] = {
      {"198.51.100.7", "not an address of this machine"},  // TEST-NET-2: never local
      {"no-such-host.invalid", "does not resolve"},
      {"::1", "IPv6"},
      {"300.1.2.3", "does not resolve"},
  };
  for (const auto& c : cases) {
    auto r = loom::test::run_process({kLoomBinary, "train", digits_config(), "--set",
                                      "trainer.output_dir=" + scratch.path("out"), "--set",
                                      "strategy.options.listen=" + c.value, "--set",
                                      "strategy.options.run_id=" + unique_run_id("badlisten")},
                                     {{"LOOM_INITIAL_PEERS", ""}}, seconds(60));
    const std::string all = r.out + r.err;
    EXPECT_FALSE(r.timed_out) << c.value;
    EXPECT_EQ(r.exit_code, 2) << c.value << "\n" << all;
    for (const std::string& word : {std::string("option listen = '") + c.value + "'", c.said, std::string("127.0.0.1")})
      EXPECT_NE(all.find(word), std::string::npos) << c.value << ": no '" << word << "' in\n" << all;
  }
}

}  // namespace
}  // namespace loom::swarm
