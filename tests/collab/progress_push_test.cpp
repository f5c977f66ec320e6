// SPDX-License-Identifier: Apache-2.0
// Push-pull progress (state_transfer.h's kStateFlagProgressPush,
// progress_push.h): a progress request may carry the reader's own record,
// which the server hands to its peer while it answers with its table.
// What arrives, sealed and plain; what a bad push gets (a clear refusal
// naming the valid lengths, on either side); the peer's bounded queue.
#include <mutex>

#include "progress_push.h"
#include "progress_shards.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

// What a server's handler received, for the test thread to look at.
struct Pushed {
  std::mutex m;
  std::vector<Bytes> got;
  std::function<void(Bytes)> handler() {
    return [this](Bytes b) {
      std::lock_guard<std::mutex> g(m);
      got.push_back(std::move(b));
    };
  }
  std::vector<Bytes> wait_for(size_t n, milliseconds timeout = milliseconds(2000)) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> g(m);
        if (got.size() >= n || Clock::now() >= deadline) return got;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
};

TEST(ProgressPush, APulledTableCarriesTheReadersRecordToTheServer) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  Pushed pushed;
  server.set_progress_push(pushed.handler());
  const Bytes other = pattern(300, 1), mine = pattern(280, 2);
  server.publish_progress({{11, other}});
  std::string why;
  auto table = fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, std::nullopt,
                              nullptr, &mine);
  ASSERT_TRUE(table) << why;
  ASSERT_EQ(table->size(), 1u);  // the reply is what it was without a push
  EXPECT_EQ(table->front(), other);
  const auto got = pushed.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.front(), mine);
  EXPECT_EQ(server.progress_pushed(), 1u);
  // Without a push nothing is handed on.
  ASSERT_TRUE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why)) << why;
  EXPECT_EQ(pushed.wait_for(2, milliseconds(200)).size(), 1u);
}

TEST(ProgressPush, AKeyedSwarmsPushesAreSealedAndOnlyItsPeersOpenThem) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key_of(7));
  Pushed pushed;
  server.set_progress_push(pushed.handler());
  const ProgressPush reader(kRun, key_of(7));
  const Bytes record = pattern(250, 3);
  const Bytes wrapped = reader.wrap(record);
  EXPECT_NE(wrapped, record);  // nobody on the wire reads it
  std::string why;
  ASSERT_TRUE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, key_of(7), nullptr,
                             &wrapped))
      << why;
  // Without the key the request is refused, and nothing is handed on.
  EXPECT_FALSE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, std::nullopt, nullptr,
                              &wrapped));
  const auto got = pushed.wait_for(2, milliseconds(500));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.front(), wrapped);

  ProgressPush peer(kRun, key_of(7));
  peer.receive(got.front());
  peer.receive(ProgressPush(kRun, key_of(8)).wrap(record));   // another swarm's key
  peer.receive(ProgressPush(kRun + 1, key_of(7)).wrap(record));  // another run
  peer.receive(record);                                       // not sealed at all
  const auto opened = peer.take();
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened.front(), record);
  EXPECT_EQ(peer.received(), 4u);
  EXPECT_EQ(peer.unopened(), 3u);
  EXPECT_TRUE(peer.take().empty());  // taken once
}

TEST(ProgressPush, APushOfNoBytesOrTooManyIsRefusedNamingTheValidLengths) {
  // A server each, as it says once a minute what it turned an address away for.
  auto refused = [](const Bytes &req, const std::string &said) {
    LogSink log;
    StateServer server("127.0.0.1", 0, kRun, log.fn());
    Pushed pushed;
    server.set_progress_push(pushed.handler());
    EXPECT_EQ(status_of_reply(server.port(), req), int(StateStatus::bad_request)) << said;
    EXPECT_TRUE(log.has(Level::warn, {said.c_str()})) << log.text();
    EXPECT_TRUE(pushed.wait_for(1, milliseconds(100)).empty()) << said;
  };
  for (uint32_t len : {0u, kMaxPushedProgressBytes + 1}) {
    Bytes req = request_bytes(kRun, 0, kStateFlagProgress | kStateFlagProgressPush);
    le(req, len, 4);
    refused(req, "pushed a progress record of " + std::to_string(len) + " bytes (1 to 4096)");
  }
  // A push with anything but a progress request is no request a server knows.
  refused(request_bytes(kRun, 0, kStateFlagProgressPush), "64 (with progress: a pushed record; with oob, required)");
  refused(request_bytes(kRun, 0, kStateFlagModel | kStateFlagProgressPush), "64 (with progress: a pushed record; with oob, required)");
  // The reader's side refuses to send one first.
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  std::string why;
  const Bytes huge = pattern(kMaxPushedProgressBytes + 1, 4), none;
  EXPECT_FALSE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, std::nullopt,
                              nullptr, &huge));
  EXPECT_NE(why.find("a pushed record of 4097 bytes (1 to 4096"), std::string::npos) << why;
  EXPECT_FALSE(fetch_progress("127.0.0.1", server.port(), kRun, 0, 0, milliseconds(2000), &why, std::nullopt,
                              nullptr, &none));
  EXPECT_NE(why.find("a pushed record of 0 bytes"), std::string::npos) << why;
}

TEST(ProgressPush, APushCutShortIsDroppedAtTheIdleTimeoutAndNeverHandedOn) {
  LogSink log;
  ServeLimits limits;
  limits.idle_timeout = milliseconds(300);
  StateServer server("127.0.0.1", 0, kRun, log.fn(), limits);
  Pushed pushed;
  server.set_progress_push(pushed.handler());
  Bytes req = request_bytes(kRun, 0, kStateFlagProgress | kStateFlagProgressPush);
  le(req, 100, 4);
  const Bytes part = pattern(10, 5);
  req.insert(req.end(), part.begin(), part.end());  // 10 of the 100 bytes it announced
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_bytes(fd, req));
  uint8_t b = 0;
  const auto start = Clock::now();
  EXPECT_LE(::recv(fd, &b, 1, 0), 0);  // closed, nothing answered
  EXPECT_LT(seconds_since(start), 3.0);
  ::close(fd);
  EXPECT_TRUE(pushed.wait_for(1, milliseconds(200)).empty());
  EXPECT_EQ(server.progress_pushed(), 0u);
}

TEST(ProgressPush, TheQueueKeepsTheNewestWhenItOverflows) {
  ProgressPush peer(kRun, std::nullopt);
  for (size_t i = 0; i < ProgressPush::kMaxQueued + 10; ++i) peer.receive(Bytes{uint8_t(i & 0xff), uint8_t(i >> 8)});
  const auto got = peer.take();
  ASSERT_EQ(got.size(), ProgressPush::kMaxQueued);
  EXPECT_EQ(got.front(), (Bytes{10, 0}));  // the 10 oldest went
  EXPECT_EQ(peer.overflowed(), 10u);
  EXPECT_EQ(peer.received(), ProgressPush::kMaxQueued + 10);
}

// A full peer's record that answers progress requests.
ProgressRecord serving(uint64_t id) {
  ProgressRecord r;
  r.peer_id = id;
  r.state_host = "10.0.0." + std::to_string(id % 250);
  r.state_port = uint16_t(7000 + id % 1000);
  return r;
}

// The records held, as pull_candidates asks for them.
std::function<std::vector<ProgressRecord>()> held(std::vector<ProgressRecord> records) {
  return [records] { return records; };
}

std::vector<uint64_t> ids_of(const std::vector<PullCandidate> &c) {
  std::vector<uint64_t> out;
  for (const auto &x : c) out.push_back(x.id);
  return out;
}

TEST(PullCandidates, TheLiveServingPeersOfTheKeyOtherThanMe) {
  ProgressRecord client = serving(3), left = serving(4), away = serving(5), no_server = serving(6);
  client.flags = ProgressRecord::kClient;
  left.flags = ProgressRecord::kLeft;
  away.flags = ProgressRecord::kAway;
  no_server.state_port = 0;
  bool stale = true;
  const auto got = pull_candidates({serving(1), serving(2), client, left, away, no_server}, held({serving(9)}), 1, 0, 0, {},
                                   1000, &stale);
  EXPECT_EQ(ids_of(got), (std::vector<uint64_t>{2}));
  EXPECT_FALSE(stale) << "a live record names a peer: the held ones are not asked";
  EXPECT_EQ(got[0].host, "10.0.0.2");
  EXPECT_EQ(got[0].port, 7002);
  int asked = 0;  // the held records are not even gathered then
  pull_candidates({serving(2)}, [&] { ++asked; return std::vector<ProgressRecord>{}; }, 1, 0, 0, {}, 1000, &stale);
  EXPECT_EQ(asked, 0);
}

TEST(PullCandidates, WithNoLivePeerToAskThoseOfTheRecordsHeldAreAskedAndSaidStale) {
  ProgressRecord client = serving(3);
  client.flags = ProgressRecord::kClient;
  bool stale = false;
  auto got = pull_candidates({client}, held({client, serving(7), serving(8)}), 1, 0, 0, {}, 1000, &stale);
  EXPECT_EQ(ids_of(got), (std::vector<uint64_t>{7, 8}));
  EXPECT_TRUE(stale);
  // Nothing held either: nobody to ask, and not stale.
  got = pull_candidates({}, held({}), 1, 0, 0, {}, 1000, &stale);
  EXPECT_TRUE(got.empty());
  EXPECT_FALSE(stale);
}

TEST(PullCandidates, APeerWhosePullFailedWaitsOutItsBackoff) {
  const std::map<uint64_t, int64_t> failed = {{2, 5000}};
  bool stale = false;
  // Its record is the only live one: during the backoff the held records
  // are asked instead, without it.
  auto got = pull_candidates({serving(2)}, held({serving(2), serving(7)}), 1, 0, 0, failed, 4999, &stale);
  EXPECT_EQ(ids_of(got), (std::vector<uint64_t>{7}));
  EXPECT_TRUE(stale);
  got = pull_candidates({serving(2)}, held({serving(2), serving(7)}), 1, 0, 0, failed, 5000, &stale);
  EXPECT_EQ(ids_of(got), (std::vector<uint64_t>{2}));
  EXPECT_FALSE(stale);
}

TEST(PullCandidates, OnlyPeersThatWriteToTheKeysShard) {
  std::vector<ProgressRecord> live;
  for (uint64_t id = 10; id < 74; ++id) live.push_back(serving(id * 0x9e3779b97f4a7c15ull));
  for (uint32_t shard = 0; shard < 4; ++shard) {
    bool stale = false;
    const auto got = pull_candidates(live, held(live), 1, 2, shard, {}, 0, &stale);
    EXPECT_FALSE(got.empty()) << "64 ids leave no shard of 4 empty";
    for (const auto &c : got) EXPECT_EQ(shard_of(c.id, 2), shard);
    size_t expected = 0;
    for (const auto &r : live) expected += shard_of(r.peer_id, 2) == shard;
    EXPECT_EQ(got.size(), expected);
  }
}

}  // namespace
}  // namespace loom_collab
