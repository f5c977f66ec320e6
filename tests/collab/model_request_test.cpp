// SPDX-License-Identifier: Apache-2.0
// The state server's model request (kStateFlagModel): what a peer about to
// join asks an initial peer, before its own DHT node starts, to learn which
// model the swarm trains (Peer::preflight_model).
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

Bytes model_record(uint64_t fingerprint, uint32_t peers) {
  FingerprintRecord r;
  r.fingerprint = fingerprint;
  r.text = "parameter '0.weight': Float [128, 64]\n";
  r.peers = peers;
  static const Identity signer;
  return encode(kRun, r, signer);
}

TEST(ModelRequest, NotReadyUntilPublishedThenTheRecordThenNotReadyWhenWithdrawn) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  std::string why;
  EXPECT_FALSE(fetch_model("127.0.0.1", server.port(), kRun, milliseconds(2000), &why));
  EXPECT_NE(why.find("not ready"), std::string::npos) << why;
  // Asking for the model never asks the training thread for a snapshot.
  EXPECT_FALSE(server.wanted());

  const Bytes record = model_record(0x42, 3);
  server.publish_model(record);
  auto got = fetch_model("127.0.0.1", server.port(), kRun, milliseconds(2000), &why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(*got, record);
  auto f = decode_fingerprint(kRun, got->data(), got->size(), &why);
  ASSERT_TRUE(f) << why;
  EXPECT_EQ(f->peers, 3u);

  server.publish_model({});
  EXPECT_FALSE(fetch_model("127.0.0.1", server.port(), kRun, milliseconds(2000), &why));
  EXPECT_NE(why.find("not ready"), std::string::npos) << why;
}

TEST(ModelRequest, TheStateAndTheModelAreServedApart) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  const Bytes state = pattern(100000, 7), record = model_record(0x43, 1);
  server.publish(5, state);
  server.publish_model(record);
  std::string why;
  auto model = fetch_model("127.0.0.1", server.port(), kRun, milliseconds(2000), &why);
  ASSERT_TRUE(model) << why;
  EXPECT_EQ(*model, record);
  auto got = download_state({donor(1, server.port())}, kRun, 5, milliseconds(5000), milliseconds(2000), log.fn(), &why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(got->bytes, state);
  EXPECT_EQ(got->epoch, 5);
}

TEST(ModelRequest, AnotherRunIsRefused) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun + 1, log.fn());
  server.publish_model(model_record(0x44, 1));
  std::string why;
  EXPECT_FALSE(fetch_model("127.0.0.1", server.port(), kRun, milliseconds(2000), &why));
  EXPECT_NE(why.find("another run"), std::string::npos) << why;
}

TEST(ModelRequest, UnknownFlagsAreRefusedNamingThem) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  server.publish(1, pattern(10, 1));
  const Bytes req = request_bytes(kRun, 0, 256);  // flags: a bit the server does not know
  EXPECT_EQ(status_of_reply(server.port(), req), int(StateStatus::bad_request));
  EXPECT_TRUE(log.has(Level::warn, {"request flags 256", "knows 0 (state), 1 (model), 4 (relay), 8 (dial back), 16 (a range of chunks, at least one), 32 (progress records), 128 (an oob part; one of these six at most), 64 (with progress: a pushed record; with oob, required) and 2 (keyed)"})) << log.text();
}

TEST(ModelRequest, ARecordOverTheLimitIsRefusedOnBothSides) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  EXPECT_THROW(server.publish_model(Bytes(kMaxModelBytes + 1, 0)), std::invalid_argument);
  // A server that sends more than a model record may be is not read further.
  Reply r;
  r.total = kMaxModelBytes + 1;
  FakeDonor liar(sends(reply_header(r, {})));
  std::string why;
  EXPECT_FALSE(fetch_model("127.0.0.1", liar.port(), kRun, milliseconds(2000), &why));
  EXPECT_NE(why.find("a model record of 65537 bytes (limit 65536)"), std::string::npos) << why;
}

TEST(ModelRequest, NobodyListeningFailsAtOnce) {
  uint16_t port = 0;
  {
    LogSink log;
    StateServer gone("127.0.0.1", 0, kRun, log.fn());
    port = gone.port();
  }
  std::string why;
  const auto t = Clock::now();
  EXPECT_FALSE(fetch_model("127.0.0.1", port, kRun, milliseconds(2000), &why));
  EXPECT_NE(why.find("cannot connect"), std::string::npos) << why;
  EXPECT_LT(seconds_since(t), 1.0);
}

}  // namespace
}  // namespace loom_collab
