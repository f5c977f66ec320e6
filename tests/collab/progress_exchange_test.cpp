// SPDX-License-Identifier: Apache-2.0
// Progress requests (state_transfer.h's kStateFlagProgress): a peer's state
// server hands out the signed progress records it holds, those of the one
// DHT key a reader names, so that peers read one another's progress between
// DHT reads (peer_progress.cpp). The table's encoding, the server's filter
// by key, a keyed swarm, the server's limits, and bad input on both sides.
#include "progress_shards.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

// A record's bytes as the server keeps them (it never decodes them): the
// id, then filler, so that each one is told apart.
Bytes record_of(uint64_t id, size_t n = 300) {
  Bytes b = pattern(n, id);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(id >> (8 * i));
  return b;
}
uint64_t id_in(const Bytes &b) {
  uint64_t id = 0;
  for (int i = 7; i >= 0; --i) id = (id << 8) | b[size_t(i)];
  return id;
}

std::vector<std::pair<uint64_t, Bytes>> table_of(const std::vector<uint64_t> &ids) {
  std::vector<std::pair<uint64_t, Bytes>> t;
  for (uint64_t id : ids) t.emplace_back(id, record_of(id));
  return t;
}

// The server counts a request once the client has read every byte, a
// moment after the client has its answer.
bool served_within(const StateServer &server, uint64_t n, milliseconds timeout = milliseconds(2000)) {
  const auto deadline = Clock::now() + timeout;
  while (server.progress_served() < n && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  return server.progress_served() == n;
}

TEST(ProgressTable, RoundTripsAndRefusesMalformedTablesNamingTheDefect) {
  const Bytes a = record_of(1), b = record_of(2, 17), empty;
  const Bytes table = encode_progress_table({&a, &b, &empty});
  std::vector<Bytes> out;
  std::string why;
  ASSERT_TRUE(decode_progress_table(table.data(), table.size(), &out, &why)) << why;
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], a);
  EXPECT_EQ(out[1], b);
  EXPECT_TRUE(out[2].empty());

  EXPECT_FALSE(decode_progress_table(table.data(), table.size() - 1, &out, &why));
  EXPECT_NE(why.find("record 2 of a progress table of 3 records runs past its end"), std::string::npos) << why;
  EXPECT_TRUE(out.empty());
  Bytes longer = table;
  longer.push_back(0);
  EXPECT_FALSE(decode_progress_table(longer.data(), longer.size(), &out, &why));
  EXPECT_NE(why.find("1 bytes left over"), std::string::npos) << why;
  EXPECT_FALSE(decode_progress_table(table.data(), 3, &out, &why));
  EXPECT_NE(why.find("shorter than its 4-byte count"), std::string::npos) << why;
  Bytes many(4);
  for (int i = 0; i < 4; ++i) many[size_t(i)] = uint8_t((kMaxProgressRecords + 1) >> (8 * i));
  EXPECT_FALSE(decode_progress_table(many.data(), many.size(), &out, &why));
  EXPECT_NE(why.find("4097 records (at most 4096)"), std::string::npos) << why;
  // A length that wraps past the end when added (0xffffffff) is no read past it.
  Bytes wraps = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 7};
  EXPECT_FALSE(decode_progress_table(wraps.data(), wraps.size(), &out, &why));
  EXPECT_NE(why.find("runs past its end"), std::string::npos) << why;
}

TEST(ProgressTable, RecordsPastTheLimitAreLeftOutFromTheEnd) {
  const Bytes big1 = record_of(1, 100 * 1024), big2 = record_of(2, 100 * 1024), big3 = record_of(3, 100 * 1024);
  const Bytes table = encode_progress_table({&big1, &big2, &big3});
  EXPECT_LE(table.size(), kMaxProgressBytes);
  std::vector<Bytes> out;
  std::string why;
  ASSERT_TRUE(decode_progress_table(table.data(), table.size(), &out, &why)) << why;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], big1);
  EXPECT_EQ(out[1], big2);
}

TEST(ProgressRequest, AnEmptyTableUntilPublishedThenTheRecordsOfTheKeyAsked) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  std::string why;
  auto none = fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why);
  ASSERT_TRUE(none) << why;
  EXPECT_TRUE(none->empty());

  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= 40; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ull);
  server.publish_progress(table_of(ids));
  // Level 0: the one key of a small swarm holds every record, in order.
  uint64_t bytes = 0;
  auto all = fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, std::nullopt, &bytes);
  ASSERT_TRUE(all) << why;
  ASSERT_EQ(all->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*all)[i], record_of(ids[i]));
  EXPECT_EQ(bytes, 4 + ids.size() * (4 + 300));
  // Level 2: four keys; each request gets exactly its key's records.
  size_t seen = 0;
  for (uint32_t shard = 0; shard < 4; ++shard) {
    auto part = fetch_progress("127.0.0.1", server.port(), kRun, 2, shard, milliseconds(2000), &why);
    ASSERT_TRUE(part) << why;
    for (const auto &r : *part) EXPECT_EQ(shard_of(id_in(r), 2), shard);
    seen += part->size();
  }
  EXPECT_EQ(seen, ids.size());
  EXPECT_TRUE(served_within(server, 6)) << server.progress_served();
  // Asking for progress never asks the training thread for a snapshot,
  // nor makes this peer a busy donor.
  EXPECT_FALSE(server.wanted());
  EXPECT_EQ(server.active(), 0);
}

TEST(ProgressRequest, TheServersOwnRecordComesFirstAndOnlyUnderItsKey) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= 12; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ull);
  const uint64_t own = 0x5eed;
  server.publish_progress(table_of(ids));
  server.publish_own_progress(own, record_of(own));
  std::string why;
  auto all = fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why);
  ASSERT_TRUE(all) << why;
  ASSERT_EQ(all->size(), ids.size() + 1);
  EXPECT_EQ(all->front(), record_of(own));
  // A newer own record replaces it; the others stay.
  server.publish_own_progress(own, record_of(own, 40));
  all = fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why);
  ASSERT_TRUE(all) << why;
  ASSERT_EQ(all->size(), ids.size() + 1);
  EXPECT_EQ(all->front(), record_of(own, 40));
  for (uint32_t shard = 0; shard < 4; ++shard) {
    auto part = fetch_progress("127.0.0.1", server.port(), kRun, 2, shard, milliseconds(2000), &why);
    ASSERT_TRUE(part) << why;
    const bool mine = shard_of(own, 2) == shard;
    EXPECT_EQ(!part->empty() && part->front() == record_of(own, 40), mine) << "shard " << shard;
  }
}

TEST(ProgressRequest, AKeyedSwarmServesKeyHoldersOnly) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key_of(7));
  server.publish_progress(table_of({11, 12, 13}));
  std::string why;
  auto got = fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, key_of(7));
  ASSERT_TRUE(got) << why;
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[2], record_of(13));
  EXPECT_FALSE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why));
  EXPECT_NE(why.find("key"), std::string::npos) << why;
  EXPECT_FALSE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, key_of(8)));
  EXPECT_NE(why.find("key"), std::string::npos) << why;
}

TEST(ProgressRequest, TakesNoStateTokenAndNoTransferSlot) {
  LogSink log;
  ServeLimits limits;
  limits.max_transfers = 1;
  limits.requests_per_minute = 1;  // one state request a minute from loopback
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  server.publish_progress(table_of({1, 2}));
  const Bytes state = pattern(200000, 3);
  server.publish(4, state);
  std::string why;
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why)) << i << ": " << why;
  // The one state token of the minute is still there.
  auto got = download_state({donor(1, server.port())}, kRun, 4, milliseconds(5000), milliseconds(2000), log.fn(), &why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(got->bytes, state);
  EXPECT_TRUE(served_within(server, 30)) << server.progress_served();
}

TEST(ProgressRequest, AKeyThatDoesNotExistIsRefusedNamingTheValidOnes) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  // Level 3 has shards 0 to 7: shard 9 is none of them.
  const Bytes req = request_bytes(kRun, int64_t((uint64_t(3) << 32) | 9), kStateFlagProgress);
  EXPECT_EQ(status_of_reply(server.port(), req), int(StateStatus::bad_request));
  EXPECT_TRUE(log.has(Level::warn, {"progress records of level 3, shard 9", "levels are 0 to 12"})) << log.text();
  std::string why;
  EXPECT_FALSE(fetch_progress("127.0.0.1", server.port(), kRun, 3, 9, milliseconds(2000), &why));
  EXPECT_NE(why.find("no progress key at level 3, shard 9"), std::string::npos) << why;
}

TEST(ProgressRequest, AServerSendingTooMuchOrAMalformedTableIsNotBelieved) {
  Reply r;
  r.epoch = 0;
  r.total = kMaxProgressBytes + 1;
  FakeDonor flood(sends(reply_header(r, {})));
  std::string why;
  EXPECT_FALSE(fetch_progress("127.0.0.1", flood.port(), kRun, 0, 0, milliseconds(2000), &why));
  EXPECT_NE(why.find("a progress table of 262145 bytes (limit 262144)"), std::string::npos) << why;

  Bytes bad = {2, 0, 0, 0, 3, 0, 0, 0, 1, 2, 3, 50, 0, 0, 0};  // a second record of 50 bytes, none sent
  FakeDonor liar(sends(reply_bytes(Reply{0, 0}, bad)));
  EXPECT_FALSE(fetch_progress("127.0.0.1", liar.port(), kRun, 0, 0, milliseconds(2000), &why));
  EXPECT_NE(why.find("record 1 of a progress table of 2 records runs past its end"), std::string::npos) << why;
}

}  // namespace
}  // namespace loom_collab
