// State transfers in a swarm with a key (state_transfer.h, state_secret.h):
// both sides prove the key, the reply travels encrypted, and whoever lacks
// the key (or holds another) is refused before it holds a slot or a token.
#include "state_secret.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

loom_key::SwarmKey key_of(uint8_t fill) {
  loom_key::SwarmKey k;
  k.fill(fill);
  return k;
}

std::optional<DownloadedState> fetch(uint16_t port, const std::optional<loom_key::SwarmKey> &key, LogSink &log,
                                     std::string *why) {
  return download_state({donor(1, port)}, kRun, 0, milliseconds(10000), milliseconds(3000), log.fn(), why, nullptr,
                        key);
}

class KeyedRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(KeyedRoundTrip, TheStateArrivesIntactThroughTheEncryptedStream) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key_of(1));
  const Bytes state = pattern(GetParam(), 3);
  server.publish(4, state);
  std::string why;
  auto got = fetch(server.port(), key_of(1), log, &why);
  ASSERT_TRUE(got) << why << "\n" << log.text();
  EXPECT_EQ(got->epoch, 4);
  EXPECT_TRUE(got->bytes == state);
}

INSTANTIATE_TEST_SUITE_P(Sizes, KeyedRoundTrip, ::testing::Values(size_t(0), size_t(1), 10 * MiB),
                         [](const ::testing::TestParamInfo<size_t> &info) {
                           return info.param == 0 ? std::string("Empty")
                                  : info.param == 1 ? std::string("OneByte")
                                                    : std::string("TenMiB");
                         });

TEST(KeyedTransfer, NoKeyOrAnotherKeyIsRefusedBeforeItSpendsATokenAndLogged) {
  LogSink log;
  ServeLimits limits;
  limits.requests_per_minute = 2;  // two tokens (a download, a model): the refused clients must not spend them
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits, key_of(1));
  server.publish(2, pattern(1000, 5));
  std::string why;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(fetch(server.port(), std::nullopt, log, &why));
    EXPECT_NE(why.find("did not prove it holds the swarm's key"), std::string::npos) << why;
    EXPECT_FALSE(fetch(server.port(), key_of(2), log, &why));
    EXPECT_NE(why.find("hold different swarm keys"), std::string::npos) << why;
  }
  auto got = fetch(server.port(), key_of(1), log, &why);
  ASSERT_TRUE(got) << why << "\n" << log.text();
  // One line per address a minute: the first refusal says why, the rest are counted.
  EXPECT_TRUE(log.has(Level::warn, {"asked without the swarm key", "counted and reported at most once a minute"}))
      << log.text();
  LogSink other_log;
  StateServer other("127.0.0.1", 0, kRun, other_log.fn(), limits, key_of(1));
  EXPECT_FALSE(fetch(other.port(), key_of(2), other_log, &why));
  EXPECT_TRUE(other_log.has(Level::warn, {"does not hold this swarm's key (its proof does not match)"}))
      << other_log.text();
  // The model is refused to outsiders the same way, and given to key holders.
  server.publish_model(Bytes{1, 2, 3});
  EXPECT_FALSE(fetch_model("127.0.0.1", server.port(), kRun, milliseconds(3000), &why));
  auto model = fetch_model("127.0.0.1", server.port(), kRun, milliseconds(3000), &why, key_of(1));
  ASSERT_TRUE(model) << why;
  EXPECT_EQ(*model, (Bytes{1, 2, 3}));
}

TEST(KeyedTransfer, AKeyedClientIsRefusedByAnOpenSwarmsServer) {
  LogSink log;
  StateServer open("127.0.0.1", 0, kRun, log.fn());
  open.publish(1, pattern(10, 1));
  std::string why;
  EXPECT_FALSE(fetch(open.port(), key_of(1), log, &why));
  EXPECT_NE(why.find("its swarm has no key"), std::string::npos) << why;
  EXPECT_TRUE(log.has(Level::warn, {"offered a swarm key; this swarm has none"})) << log.text();
}

// A donor written here that knows the handshake: it may lack the key, or
// hold it and send a stream that was tampered with.
enum class Fake { no_key, flipped_frame, cut_stream };

FakeDonor::Behave fake_keyed(Fake how, const Bytes &state) {
  return [how, state](int fd, int) {
    // The request was read by FakeDonor; rebuild it as the client sent it for the proof.
    const Bytes req = request_bytes(kRun, 0);
    Bytes r = req;
    r[6] = uint8_t(kStateFlagKeyed);
    for (int i = 0; i < 4; ++i) r[24 + i] = uint8_t(crc_of(r.data(), 24) >> (8 * i));
    StateKeys keys(key_of(how == Fake::no_key ? 9 : 1));
    const StateKeys::Nonce server = StateKeys::fresh_nonce();
    Bytes ch;
    le(ch, kStateChallengeMagic, 4);
    ch.insert(ch.end(), server.begin(), server.end());
    send_bytes(fd, ch);
    uint8_t answer[kStateProofSize];
    if (!recv_bytes(fd, answer, sizeof answer)) return;
    StateKeys::Nonce client;
    std::copy(answer, answer + StateKeys::kNonceBytes, client.begin());
    uint8_t acc[kStateAcceptSize];
    for (int i = 0; i < 4; ++i) acc[i] = uint8_t(kStateAcceptMagic >> (8 * i));
    StreamSealer sealer(keys.stream_key(server, client), acc + 4);
    const auto proof = keys.proof(StateKeys::kServer, r.data(), r.size(), server, client);
    std::copy(proof.begin(), proof.end(), acc + 4 + StreamSealer::kHeaderBytes);
    send_bytes(fd, acc, sizeof acc);
    Reply reply;
    reply.epoch = 1;
    reply.chunk = 1 << 16;
    const Bytes plain = reply_bytes(reply, state);
    Bytes frames;
    const size_t half = plain.size() / 2;
    sealer.frame(plain.data(), half, false, &frames);
    sealer.frame(plain.data() + half, plain.size() - half, how != Fake::cut_stream, &frames);
    if (how == Fake::flipped_frame) frames[frames.size() / 3] ^= 0x20;
    send_bytes(fd, frames);
  };
}

TEST(KeyedTransfer, ADonorWithoutTheKeyOrATamperedStreamIsRejected) {
  LogSink log;
  const Bytes state = pattern(300000, 8);
  struct Case {
    Fake how;
    const char *expect;
  };
  for (const Case &c : {Case{Fake::no_key, "the donor does not hold this swarm's key"},
                        Case{Fake::flipped_frame, "does not open"},
                        Case{Fake::cut_stream, "did not end where its reply did"}}) {
    FakeDonor fake(fake_keyed(c.how, state));
    std::string why;
    EXPECT_FALSE(fetch(fake.port(), key_of(1), log, &why)) << c.expect;
    EXPECT_NE(why.find(c.expect), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace loom_collab
