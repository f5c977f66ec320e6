// SPDX-License-Identifier: Apache-2.0
// Dial-back (dial_back.h): a peer asks another's state server to connect
// back to it; its own state server reports the probe, which carries the
// asker's nonce, and goes only to the address the request came from.
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

}  // namespace
}  // namespace loom_collab
