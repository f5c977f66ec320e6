// SPDX-License-Identifier: Apache-2.0
// Dial-back (dial_back.h): a peer asks another's state server to connect
// back to it; its own state server reports the probe, which carries the
// asker's nonce, and goes only to the address the request came from.
#include <algorithm>
#include <thread>

#include "dial_back.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

bool saw_within(const StateServer &s, uint64_t value, milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (s.saw_probe(value)) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return s.saw_probe(value);
}

class DialBack : public ::testing::TestWithParam<bool> {};

TEST_P(DialBack, TheAskedServerConnectsBackWithTheAskersNonce) {
  const std::optional<loom_key::SwarmKey> key = GetParam() ? std::optional(key_of(5)) : std::nullopt;
  LogSink log;
  StateServer asked("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key);
  StateServer asker("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key);
  const uint64_t value = (uint64_t(0xabcdef123456) << 16) | asker.port();
  std::string why;
  ASSERT_TRUE(ask_dial_back("127.0.0.1", asked.port(), kRun, key, value, milliseconds(3000), &why)) << why;
  EXPECT_TRUE(saw_within(asker, value, milliseconds(3000))) << log.text();
  EXPECT_FALSE(asker.saw_probe(value ^ (uint64_t(1) << 20)));  // another nonce
  EXPECT_FALSE(asked.saw_probe(value));
}

INSTANTIATE_TEST_SUITE_P(Swarms, DialBack, ::testing::Bool(), [](const ::testing::TestParamInfo<bool> &info) {
  return info.param ? std::string("Keyed") : std::string("Open");
});

TEST(DialBackRefusals, AClosedPortGetsNoProbeAndAnotherRunIsRefused) {
  LogSink log;
  StateServer asked("127.0.0.1", 0, kRun, log.fn());
  StateServer asker("127.0.0.1", 0, kRun, log.fn());
  // A port nobody listens on: the request is taken, no probe comes.
  uint16_t closed = 0;
  {
    StateServer gone("127.0.0.1", 0, kRun, log.fn());
    closed = gone.port();
  }
  const uint64_t value = (uint64_t(77) << 16) | closed;
  std::string why;
  ASSERT_TRUE(ask_dial_back("127.0.0.1", asked.port(), kRun, std::nullopt, value, milliseconds(3000), &why)) << why;
  EXPECT_FALSE(saw_within(asker, value, milliseconds(1000)));
  StateServer other("127.0.0.1", 0, kRun + 1, log.fn());
  EXPECT_FALSE(ask_dial_back("127.0.0.1", other.port(), kRun, std::nullopt, (uint64_t(1) << 16) | asker.port(),
                             milliseconds(3000), &why));
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
  // A keyed swarm's server refuses an asker without the key, and never dials.
  StateServer keyed("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key_of(1));
  const uint64_t v2 = (uint64_t(78) << 16) | asker.port();
  EXPECT_FALSE(ask_dial_back("127.0.0.1", keyed.port(), kRun, std::nullopt, v2, milliseconds(3000), &why));
  EXPECT_FALSE(saw_within(asker, v2, milliseconds(500)));
}

// judge_reachability's decision, with the requests and probes scripted:
// ask(address) takes the request unless the address is in `refusing`, and
// the n-th wait for a probe sees one when seen[n] says so.
struct Script {
  std::vector<std::string> refusing;
  std::vector<bool> seen;
  std::vector<std::string> asked = {};
  std::vector<milliseconds> waits = {};
  Reachability run(const std::vector<std::string> &peers) {
    return judge_reachability(
        peers,
        [this](const std::string &a, std::string *why) {
          if (std::find(refusing.begin(), refusing.end(), a) != refusing.end()) {
            *why = "it refused: busy";
            return false;
          }
          asked.push_back(a);
          return true;
        },
        [this](milliseconds wait) {
          waits.push_back(wait);
          return waits.size() <= seen.size() && seen[waits.size() - 1];
        });
  }
};

TEST(Reachability, OneSilentPeerIsAskedAgainAndALateProbeMakesThePeerReachable) {
  Script s{{}, {false, true}};
  const auto r = s.run({"a:1"});
  EXPECT_EQ(r.verdict, Reachability::reachable);
  EXPECT_EQ(r.by, "a:1");
  EXPECT_EQ(r.tries, 2);
  EXPECT_EQ(s.waits, (std::vector<milliseconds>{milliseconds(4000), milliseconds(10000)}));
}

TEST(Reachability, TwoSilentTriesMakeItUnreachableNamingWhoWasAsked) {
  Script once{{}, {false, false}};
  auto r = once.run({"a:1"});
  EXPECT_EQ(r.verdict, Reachability::unreachable);
  EXPECT_EQ(r.by, "a:1");
  EXPECT_EQ(r.tries_text, " (asked twice)");
  EXPECT_EQ(once.asked, (std::vector<std::string>{"a:1", "a:1"}));
  // Two initial peers: the second try goes to the other one.
  Script two{{}, {false, false}};
  r = two.run({"a:1", "b:2"});
  EXPECT_EQ(r.verdict, Reachability::unreachable);
  EXPECT_EQ(r.by, "b:2");
  EXPECT_EQ(r.tries_text, " (nor could a:1)");
  EXPECT_EQ(two.asked, (std::vector<std::string>{"a:1", "b:2"}));
}

TEST(Reachability, PeersThatRefuseAreSkippedAndNoneToAskLeavesItUnknown) {
  Script skip{{"a:1"}, {true}};
  auto r = skip.run({"a:1", "b:2"});
  EXPECT_EQ(r.verdict, Reachability::reachable);
  EXPECT_EQ(r.by, "b:2");
  EXPECT_EQ(r.tries, 1);
  Script none{{"a:1", "b:2"}, {}};
  r = none.run({"a:1", "b:2"});
  EXPECT_EQ(r.verdict, Reachability::unknown);
  EXPECT_EQ(r.failures, "a:1: it refused: busy; b:2: it refused: busy");
  EXPECT_TRUE(none.waits.empty());
  // The only other peer refuses: the silent one is asked again.
  Script again{{"b:2"}, {false, false}};
  r = again.run({"a:1", "b:2"});
  EXPECT_EQ(r.verdict, Reachability::unreachable);
  EXPECT_EQ(r.tries_text, " (asked twice)");
  EXPECT_TRUE(r.failures.find("b:2") != std::string::npos);
}

}  // namespace
}  // namespace loom_collab
