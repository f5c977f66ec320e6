// SPDX-License-Identifier: Apache-2.0
// State transfers in a swarm with a key (state_transfer.h, state_secret.h):
// both sides prove the key, the reply travels encrypted, and whoever lacks
// the key (or holds another) is refused before it holds a slot or a token.
#include "state_secret.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

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
// hold it and send a reply that was tampered with.
enum class Fake { no_key, flipped_header, header_not_final, flipped_chunk, swapped_chunks, chunk_of_other_epoch, cut_short };

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
    // The header frame: the reply header (whole-state CRC 0) and the chunk key.
    Reply reply;
    reply.epoch = 1;
    reply.chunk = 1 << 16;
    Bytes header = reply_header(reply, state);
    for (int i = 28; i < 32; ++i) header[size_t(i)] = 0;
    for (int i = 0; i < 4; ++i) header[size_t(32 + i)] = uint8_t(crc_of(header.data(), 32) >> (8 * i));
    const ChunkKey chunk_key = ChunkKey::fresh();
    Bytes plain = header;
    plain.insert(plain.end(), chunk_key.bytes().begin(), chunk_key.bytes().end());
    Bytes out;
    sealer.frame(plain.data(), plain.size(), how != Fake::header_not_final, &out);
    if (how == Fake::flipped_header) out[10] ^= 0x20;
    // The chunks, each sealed under the chunk key, bound to its index and the header.
    Bytes other_epoch = header;
    other_epoch[8] ^= 1;  // a chunk sealed for another snapshot header
    std::vector<Bytes> chunks;
    for (size_t off = 0, i = 0; off < state.size(); off += reply.chunk, ++i) {
      const size_t n = std::min<size_t>(reply.chunk, state.size() - off);
      Bytes bytes(state.begin() + long(off), state.begin() + long(off + n));
      const Bytes &ad = how == Fake::chunk_of_other_epoch && i == 1 ? other_epoch : header;
      const auto tag = chunk_key.seal(i, bytes.data(), n, ad.data(), ad.size());
      Bytes c;
      le(c, n, 4);
      c.insert(c.end(), tag.begin(), tag.end());
      c.insert(c.end(), bytes.begin(), bytes.end());
      chunks.push_back(std::move(c));
    }
    if (how == Fake::flipped_chunk) chunks[2][40] ^= 0x01;
    if (how == Fake::swapped_chunks) std::swap(chunks[0], chunks[1]);  // both full-size
    if (how == Fake::cut_short) chunks.resize(2);
    for (const Bytes &c : chunks) out.insert(out.end(), c.begin(), c.end());
    send_bytes(fd, out);
  };
}

TEST(KeyedTransfer, ADonorWithoutTheKeyOrATamperedReplyIsRejected) {
  LogSink log;
  const Bytes state = pattern(300000, 8);  // 5 chunks of 64 KiB
  struct Case {
    Fake how;
    const char *expect;
  };
  for (const Case &c : {Case{Fake::no_key, "the donor does not hold this swarm's key"},
                        Case{Fake::flipped_header, "encrypted stream does not open"},
                        Case{Fake::header_not_final, "did not end where its reply header did"},
                        Case{Fake::flipped_chunk, "chunk 2 of the donor's state does not open"},
                        Case{Fake::swapped_chunks, "chunk 0 of the donor's state does not open"},
                        Case{Fake::chunk_of_other_epoch, "chunk 1 of the donor's state does not open"},
                        Case{Fake::cut_short, "connection closed by donor after 131072 of 300000 bytes"}}) {
    FakeDonor fake(fake_keyed(c.how, state));
    std::string why;
    EXPECT_FALSE(fetch(fake.port(), key_of(1), log, &why)) << c.expect;
    EXPECT_NE(why.find(c.expect), std::string::npos) << c.expect << ": " << why;
  }
}

TEST(ChunkKey, ASealedChunkOpensOnlyWithItsKeyIndexAndHeader) {
  const ChunkKey key = ChunkKey::fresh(), other = ChunkKey::fresh();
  const Bytes plain = pattern(1000, 4), header(kStateReplySize, 7);
  Bytes sealed = plain;
  const auto tag = key.seal(3, sealed.data(), sealed.size(), header.data(), header.size());
  EXPECT_NE(sealed, plain);  // encrypted in place
  auto opens = [&](const ChunkKey &k, uint64_t index, Bytes bytes, Bytes ad) {
    return k.open(index, bytes.data(), bytes.size(), ad.data(), ad.size(), tag.data());
  };
  Bytes flipped = sealed;
  flipped[500] ^= 1;
  Bytes other_header = header;
  other_header[0] ^= 1;
  EXPECT_FALSE(opens(other, 3, sealed, header));
  EXPECT_FALSE(opens(key, 4, sealed, header));
  EXPECT_FALSE(opens(key, 3, flipped, header));
  EXPECT_FALSE(opens(key, 3, sealed, other_header));
  Bytes opened = sealed;
  ASSERT_TRUE(key.open(3, opened.data(), opened.size(), header.data(), header.size(), tag.data()));
  EXPECT_EQ(opened, plain);
  // A joiner rebuilds the key from the 32 bytes the donor sends.
  const ChunkKey received(key.bytes().data());
  opened = sealed;
  EXPECT_TRUE(received.open(3, opened.data(), opened.size(), header.data(), header.size(), tag.data()));
}

}  // namespace
}  // namespace loom_collab
