// SPDX-License-Identifier: Apache-2.0
// Relaying for client-mode peers (relay.h): a client's link to a relay's
// state server carries contributions and results, open or keyed, and the
// server refuses whoever it must with a reason.
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "relay.h"
#include "state_transfer_support.hpp"
#include "state_wire.h"

namespace loom_collab {

void PrintTo(Codec c, std::ostream *os);  // compression_test.cpp: names a Codec parameter

namespace {

using namespace transfer_test;

// The relay's side for these tests: result = 2 x values + epoch, weight + 10.
void doubling(const std::string &, RelayMessage &m, const std::function<bool()> &) {
  for (auto &v : m.values) v = 2 * v + float(m.epoch);
  m.weight += 10;
  m.status = RelayStatus::averaged;
}

bool eventually(const std::function<bool()> &done, milliseconds within = milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class RelayRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(RelayRoundTrip, ContributionsComeBackAsTheRelaysResultsOnOneConnection) {
  const bool keyed = GetParam();
  const std::optional<loom_key::SwarmKey> key = keyed ? std::optional(key_of(3)) : std::nullopt;
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key);
  server.set_relay(doubling, 4, 1 << 20);
  std::string why;
  auto link = RelayLink::open("127.0.0.1", server.port(), kRun, key, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why << "\n" << log.text();
  EXPECT_TRUE(eventually([&] { return server.relaying() == 1; }));
  // Empty, small, and more than one frame (300k floats: 1.2 MB, 5 frames).
  for (size_t n : {size_t(0), size_t(5), size_t(300000)}) {
    RelayMessage m;
    m.kind = RelayKind::gradients;
    m.epoch = int64_t(n % 7);
    m.weight = 3;
    m.norm = 1.5;
    for (size_t i = 0; i < n; ++i) m.values.push_back(float(i % 1000) * 0.5f);
    const RelayMessage sent = m;
    ASSERT_TRUE(link->exchange(m, 1 << 20, std::chrono::steady_clock::now() + milliseconds(5000), &why))
        << why << "\n" << log.text();
    EXPECT_EQ(m.status, RelayStatus::averaged);
    EXPECT_EQ(m.epoch, sent.epoch);
    EXPECT_DOUBLE_EQ(m.weight, 13);
    ASSERT_EQ(m.values.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(m.values[i], 2 * sent.values[i] + float(sent.epoch)) << i;
  }
  link.reset();
  EXPECT_TRUE(eventually([&] { return server.relaying() == 0; }));
  EXPECT_TRUE(log.has(Level::info, {"relay session of client-mode peer", "ended after 3 rounds"})) << log.text();
}

INSTANTIATE_TEST_SUITE_P(Swarms, RelayRoundTrip, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? std::string("Keyed") : std::string("Open");
                         });

// A contribution in a codec reaches the relay decoded (within the codec's
// bound), and the result comes back in the same codec.
class RelayCodecs : public ::testing::TestWithParam<Codec> {};

TEST_P(RelayCodecs, AContributionAndItsResultTravelInTheCodecWithinItsBound) {
  const Codec codec = GetParam();
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  std::atomic<int> seen_codec{-1};
  server.set_relay(
      [&](const std::string &c, RelayMessage &m, const std::function<bool()> &stop) {
        seen_codec = int(m.codec);
        doubling(c, m, stop);
      },
      4, 1 << 20);
  std::string why;
  auto link = RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why << "\n" << log.text();
  RelayMessage m;
  m.epoch = 3;
  m.weight = 3;
  m.codec = codec;
  for (size_t i = 0; i < 1000; ++i) m.values.push_back(float(int(i % 200) - 100) * 0.013f);
  const RelayMessage sent = m;
  ASSERT_TRUE(link->exchange(m, 1 << 20, std::chrono::steady_clock::now() + milliseconds(5000), &why)) << why;
  EXPECT_EQ(seen_codec.load(), int(codec));
  EXPECT_EQ(m.codec, codec);
  ASSERT_EQ(m.values.size(), sent.values.size());
  const double absmax = 100 * 0.013;  // every blockwise8 block holds -100 x 0.013
  for (size_t i = 0; i < m.values.size(); ++i) {
    const double exact = 2.0 * sent.values[i] + 3;
    const double bound = 2 * codec_error_bound(codec, sent.values[i], absmax) +
                         codec_error_bound(codec, exact, 2 * absmax + 3 + 0.1) + 1e-6;
    ASSERT_LE(std::fabs(m.values[i] - exact), bound) << codec_name(codec) << " value " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(EachCodec, RelayCodecs, ::testing::Values(Codec::fp16, Codec::bf16, Codec::blockwise8),
                         [](const ::testing::TestParamInfo<Codec> &info) { return std::string(codec_name(info.param)); });

TEST(Relay, AServerThatRelaysForNobodyRefusesWithAReason) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  std::string why;
  EXPECT_FALSE(RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why));
  EXPECT_NE(why.find("relays for nobody"), std::string::npos) << why;
}

TEST(Relay, ClientsBeyondRelayClientsAreAnsweredBusy) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  server.set_relay(doubling, 1, 100);
  std::string why;
  auto first = RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(first) << why;
  ASSERT_TRUE(eventually([&] { return server.relaying() == 1; }));
  EXPECT_FALSE(RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why));
  EXPECT_NE(why.find("busy"), std::string::npos) << why;
  EXPECT_TRUE(log.has(Level::warn, {"relays for 1 client-mode peers already", "relay_clients"})) << log.text();
  first.reset();
  ASSERT_TRUE(eventually([&] { return server.relaying() == 0; }));
  EXPECT_TRUE(RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why)) << why;
}

TEST(Relay, AnotherKeyIsRefusedBeforeAnySession) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key_of(1));
  server.set_relay(doubling, 4, 100);
  std::string why;
  EXPECT_FALSE(RelayLink::open("127.0.0.1", server.port(), kRun, key_of(2), milliseconds(5000), &why));
  EXPECT_NE(why.find("hold different swarm keys"), std::string::npos) << why;
  EXPECT_FALSE(RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why));
  EXPECT_EQ(server.relaying(), 0);
}

TEST(Relay, AContributionLargerThanTheModelEndsTheSession) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  server.set_relay(doubling, 4, 10);
  std::string why;
  auto link = RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why;
  RelayMessage m;
  m.values.assign(11, 1.0f);
  EXPECT_FALSE(link->exchange(m, 100, std::chrono::steady_clock::now() + milliseconds(5000), &why));
  EXPECT_TRUE(eventually([&] { return log.has(Level::warn, {"bad relay message", "11 values, more than the 10"}); }))
      << log.text();
  EXPECT_TRUE(eventually([&] { return server.relaying() == 0; }));
}

// A relay session opened by hand on an open swarm's server, so that a test
// can send what no RelayLink would. The server's reply is checked (taken).
void open_raw_session(const StateServer &server, const wire::IoLimits &lim, wire::Fd *fd) {
  using namespace wire;
  std::string why;
  ASSERT_TRUE(connect_to("127.0.0.1", server.port(), lim, fd, &why)) << why;
  uint8_t req[kStateRequestSize];
  encode_request(req, kRun, 0, kStateFlagRelay);
  iovec iov{req, sizeof req};
  int err = 0;
  ASSERT_EQ(write_all(fd->get(), &iov, 1, lim, &err), Io::ok);
  uint8_t reply[kStateReplySize];
  size_t got = 0;
  ASSERT_EQ(read_all(fd->get(), reply, sizeof reply, lim, &got, &err), Io::ok);
  EXPECT_EQ(get16(reply + 6), uint16_t(StateStatus::ok));
}

// Sends header h in a frame whose CRC is frame_crc on a raw session, and
// expects the session to end with a bad-message warning that says warned.
void a_bad_header_ends_the_session(const uint8_t (&h)[kRelayHeaderSize], uint32_t frame_crc, const char *warned) {
  using namespace wire;
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  server.set_relay(doubling, 4, 10);
  IoLimits lim{milliseconds(3000), Clock::now() + milliseconds(5000), nullptr, -1};
  Fd fd;
  ASSERT_NO_FATAL_FAILURE(open_raw_session(server, lim, &fd));
  uint8_t frame[8 + kRelayHeaderSize];
  put32(frame, kRelayHeaderSize);
  put32(frame + 4, frame_crc);
  std::memcpy(frame + 8, h, sizeof h);
  iovec f{frame, sizeof frame};
  int err = 0;
  ASSERT_EQ(write_all(fd.get(), &f, 1, lim, &err), Io::ok);
  EXPECT_TRUE(eventually([&] { return log.has(Level::warn, {"bad relay message", warned}); })) << log.text();
  EXPECT_TRUE(eventually([&] { return server.relaying() == 0; }));
}

TEST(Relay, ACorruptedFrameEndsTheSessionWithAWarning) {
  // A header frame whose CRC does not match its bytes.
  uint8_t h[kRelayHeaderSize] = {};
  wire::put32(h, kRelayMagic);
  a_bad_header_ends_the_session(h, 0xdeadbeef, "checksum does not match");
}

// Under local updates a relay whose group took the mean of differing outer
// states answers resync, with the group's weight and no values.
void resyncing(const std::string &, RelayMessage &m, const std::function<bool()> &) {
  m.values.clear();
  m.weight += 10;
  m.status = RelayStatus::resync;
}

TEST(Relay, AResyncAnswerCarriesNoValues) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  server.set_relay(resyncing, 4, 100);
  std::string why;
  auto link = RelayLink::open("127.0.0.1", server.port(), kRun, std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why;
  RelayMessage m;
  m.epoch = 7;
  m.weight = 32;
  m.values.assign(100, 0.25f);
  ASSERT_TRUE(link->exchange(m, 100, std::chrono::steady_clock::now() + milliseconds(5000), &why)) << why;
  EXPECT_EQ(m.status, RelayStatus::resync);
  EXPECT_STREQ(to_string(m.status), "resync");
  EXPECT_EQ(m.epoch, 7);
  EXPECT_DOUBLE_EQ(m.weight, 42);
  EXPECT_TRUE(m.values.empty());
}

TEST(Relay, AnUnknownStatusEndsTheSessionNamingTheValidOnes) {
  uint8_t h[kRelayHeaderSize] = {};
  wire::put32(h, kRelayMagic);
  wire::put16(h + 4, uint16_t(RelayKind::gradients));
  wire::put16(h + 6, 5);
  wire::put32(h + 48, wire::crc(h, 48));
  a_bad_header_ends_the_session(h, wire::crc(h, sizeof h), "unknown status 5 (0 contribution, 1 averaged, 2 missed, 3 refused, 4 resync)");
}

TEST(Relay, AnUnknownCodecEndsTheSessionNamingTheValidOnes) {
  // A well-formed header but for its codec byte.
  uint8_t h[kRelayHeaderSize] = {};
  wire::put32(h, kRelayMagic);
  wire::put16(h + 4, uint16_t(RelayKind::gradients));
  wire::put32(h + 48, wire::crc(h, 48));
  h[52] = 9;
  a_bad_header_ends_the_session(h, wire::crc(h, sizeof h), "unknown codec 9 (0 none, 1 fp16, 2 bf16, 3 blockwise8)");
}

}  // namespace
}  // namespace loom_collab
