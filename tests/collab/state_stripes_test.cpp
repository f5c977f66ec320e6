// SPDX-License-Identifier: Apache-2.0
// A download spread over donors (state_download_stripes.cpp): donors that
// hold the same bytes each bring chunks, a donor behind a slow link brings
// few whether it answered first or not, a donor holding other bytes is
// left out, and range requests a server cannot serve are refused.
#include "state_donor.h"
#include "state_transfer_support.hpp"

#include <regex>

namespace loom_collab {
namespace {

using namespace transfer_test;

// Forwards one TCP connection at a time to a server, the server's side at
// most `rate` bytes a second: a donor on a slow link.
class SlowLink {
 public:
  SlowLink(uint16_t target, double rate) : target_(target), rate_(rate) {
    listen_ = listen_on_loopback(&port_);
    accepter_ = std::thread([this] { accept_loop(); });
  }
  ~SlowLink() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    accepter_.join();
    for (auto &t : pumps_) t.join();
    ::close(listen_);
  }
  uint16_t port() const { return port_; }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = connect_to(target_);
      if (server < 0) {
        ::close(client);
        continue;
      }
      pumps_.emplace_back([this, client, server] {
        std::thread up([this, client, server] { pump(client, server, 0); });
        pump(server, client, rate_);
        up.join();
        ::close(client);
        ::close(server);
      });
    }
  }
  // Copies from -> to until either side ends, paced to `rate` (0: as fast as it comes).
  void pump(int from, int to, double rate) {
    std::vector<char> buf(16 * 1024);
    const auto start = Clock::now();
    double moved = 0;
    while (!stop_) {
      pollfd p{from, POLLIN, 0};
      const int ready = ::poll(&p, 1, 50);
      if (ready == 0) continue;
      const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      if (::send(to, buf.data(), size_t(n), MSG_NOSIGNAL) != n) break;
      moved += double(n);
      if (rate > 0) {
        const double due = moved / rate - seconds_since(start);
        if (due > 0) std::this_thread::sleep_for(std::chrono::duration<double>(due));
      }
    }
    ::shutdown(from, SHUT_RDWR);
    ::shutdown(to, SHUT_RDWR);
  }
  uint16_t target_;
  double rate_;
  int listen_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accepter_;
  std::vector<std::thread> pumps_;
};

// The chunks each donor brought, from the download's log line.
std::map<uint64_t, size_t> chunks_by_donor(const std::string &log) {
  std::map<uint64_t, size_t> out;
  const auto at = log.find("spread over donors (chunks: ");
  if (at == std::string::npos) return out;
  const std::string line = log.substr(at, log.find('\n', at) - at);
  static const std::regex each(R"((\d+) from donor (\d+))");
  for (std::sregex_iterator it(line.begin(), line.end(), each), end; it != end; ++it)
    out[std::stoull((*it)[2])] = std::stoul((*it)[1]);
  return out;
}

size_t sum(const std::map<uint64_t, size_t> &m) {
  size_t n = 0;
  for (const auto &[k, v] : m) n += v;
  return n;
}

class Spread : public ::testing::TestWithParam<bool> {};  // keyed or not

TEST_P(Spread, DonorsOfTheSameBytesEachBringChunks) {
  const bool keyed = GetParam();
  std::optional<loom_key::SwarmKey> key;
  if (keyed) key = key_of(9);
  LogSink log;
  const Bytes state = pattern(160 * MiB + 12345, 5);  // 41 chunks, the last one short
  std::vector<std::unique_ptr<StateServer>> servers;
  std::vector<std::unique_ptr<SlowLink>> links;  // 64 MiB/s each: helpers join long before the end
  std::vector<Donor> donors;
  for (uint64_t id = 1; id <= 3; ++id) {
    servers.push_back(std::make_unique<StateServer>("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key));
    servers.back()->publish(20, state);
    links.push_back(std::make_unique<SlowLink>(servers.back()->port(), 64.0 * MiB));
    donors.push_back(donor(id, links.back()->port()));
  }
  std::string why;
  auto got = download_state(donors, kRun, 20, milliseconds(60000), milliseconds(5000), log.fn(), &why, nullptr, key, 3);
  ASSERT_TRUE(got) << why << "\n" << log.text();
  EXPECT_EQ(got->epoch, 20);
  ASSERT_EQ(got->bytes.size(), state.size());
  EXPECT_TRUE(got->bytes == state);
  const auto brought = chunks_by_donor(log.text());
  EXPECT_EQ(sum(brought), 41u) << log.text();
  EXPECT_GE(brought.size(), 2u) << "one donor brought every chunk\n" << log.text();
}

INSTANTIATE_TEST_SUITE_P(Keys, Spread, ::testing::Values(false, true),
                         [](const auto &info) { return info.param ? "Keyed" : "Open"; });

// A donor behind a link of 8 MiB/s and two behind links of 64 MiB/s:
// alone it would take 10 s; it brings a few chunks, whether its reply came
// first (the others publish later: it streams from the start) or last (it
// helps).
class SlowDonor : public ::testing::TestWithParam<bool> {};  // answers first or not

TEST_P(SlowDonor, BringsFewChunksAndDoesNotSetThePace) {
  const bool slow_first = GetParam();
  LogSink log;
  const Bytes state = pattern(80 * MiB, 8);  // 20 chunks
  StateServer slow("127.0.0.1", 0, kRun, log.fn()), fast1("127.0.0.1", 0, kRun, log.fn()),
      fast2("127.0.0.1", 0, kRun, log.fn());
  SlowLink link(slow.port(), 8.0 * MiB), link1(fast1.port(), 64.0 * MiB), link2(fast2.port(), 64.0 * MiB);
  (slow_first ? slow : fast1).publish(30, state);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(300));  // waited for as a donor's next step boundary
    (slow_first ? fast1 : slow).publish(30, state);
    fast2.publish(30, state);
  });
  std::string why;
  const auto t0 = Clock::now();
  auto got = download_state({donor(1, link.port()), donor(2, link1.port()), donor(3, link2.port())}, kRun, 30,
                            milliseconds(60000), milliseconds(5000), log.fn(), &why, nullptr, std::nullopt, 3);
  const double took = seconds_since(t0);
  later.join();
  ASSERT_TRUE(got) << why << "\n" << log.text();
  EXPECT_TRUE(got->bytes == state);
  const auto brought = chunks_by_donor(log.text());
  ASSERT_EQ(sum(brought), 20u) << log.text();
  // At most 6 of 20 chunks (24 MiB, 3 s at its rate) from the slow donor:
  // it did not set the pace (alone: 10 s). Checked by chunks, not seconds,
  // which a loaded machine stretches.
  EXPECT_LE(brought.count(1) ? brought.at(1) : 0, 6u) << "the slow donor set the pace\n" << log.text();
  std::printf("[ figures  ] %s: %.2f s for 80 MiB; chunks from the slow donor %zu of 20\n",
              slow_first ? "slow donor first" : "slow donor helping", took, brought.count(1) ? brought.at(1) : 0);
}

INSTANTIATE_TEST_SUITE_P(Order, SlowDonor, ::testing::Values(true, false),
                         [](const auto &info) { return info.param ? "AnsweringFirst" : "Helping"; });

// A donor that reaches the epoch asked for only after its wait for a
// snapshot ran out (it said "nothing published in time") is asked again
// while the spread is underway, and brings chunks: in a swarm whose steps
// take seconds, the first donor at the sync point brought every chunk alone.
TEST(Spread, ADonorThatWasNotReadyIsAskedAgainAndHelps) {
  LogSink log;
  const Bytes state = pattern(80 * MiB, 3);  // 20 chunks
  StateServer first("127.0.0.1", 0, kRun, log.fn()), late("127.0.0.1", 0, kRun, log.fn());
  late.set_wait_for_publish(milliseconds(100));
  first.publish(50, state);
  SlowLink link(first.port(), 16.0 * MiB);  // 5 s alone
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(800));
    late.publish(50, state);
  });
  std::string why;
  auto got = download_state({donor(1, link.port()), donor(2, late.port())}, kRun, 50, milliseconds(60000),
                            milliseconds(5000), log.fn(), &why, nullptr, std::nullopt, 2);
  later.join();
  ASSERT_TRUE(got) << why << "\n" << log.text();
  EXPECT_TRUE(got->bytes == state);
  EXPECT_TRUE(log.has(Level::info, {"donor 2", "has no state of the epoch asked for yet"})) << log.text();
  const auto brought = chunks_by_donor(log.text());
  ASSERT_EQ(sum(brought), 20u) << log.text();
  EXPECT_GE(brought.count(2) ? brought.at(2) : 0, 1u) << "the donor that came late never helped\n" << log.text();
}

TEST(Spread, ADonorHoldingOtherBytesIsLeftOut) {
  LogSink log;
  const Bytes state = pattern(64 * MiB, 1), other = pattern(64 * MiB, 2);  // same epoch and size
  StateServer first("127.0.0.1", 0, kRun, log.fn()), odd("127.0.0.1", 0, kRun, log.fn());
  first.publish(40, state);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    odd.publish(40, other);
  });
  // The first donor behind a slow link, so that the odd one is asked to help.
  SlowLink link(first.port(), 32.0 * MiB);
  std::string why;
  auto got = download_state({donor(1, link.port()), donor(2, odd.port())}, kRun, 40, milliseconds(60000),
                            milliseconds(5000), log.fn(), &why, nullptr, std::nullopt, 2);
  later.join();
  ASSERT_TRUE(got) << why << "\n" << log.text();
  EXPECT_TRUE(got->bytes == state);
  EXPECT_TRUE(log.has(Level::info, {"donor 2", "left the spread download", "other bytes of epoch 40"})) << log.text();
}

// A state is cut in chunks of 1 to 4 MiB (a power of two, 12 to 24 of them
// from 24 to 96 MiB), so
// that a small one still has chunks left for helpers that come late.
TEST(Spread, ChunksAreOneToFourMebibytesAboutTwentyFourToAState) {
  EXPECT_EQ(wire::state_chunk_bytes(0), 1 * MiB);
  EXPECT_EQ(wire::state_chunk_bytes(300 * 1024), 1 * MiB);
  EXPECT_EQ(wire::state_chunk_bytes(20736768), 1 * MiB);  // charlm of 1.7 M parameters with AdamW: 20 chunks
  EXPECT_EQ(wire::state_chunk_bytes(24 * MiB + 1), 2 * MiB);
  EXPECT_EQ(wire::state_chunk_bytes(48 * MiB), 2 * MiB);
  EXPECT_EQ(wire::state_chunk_bytes(80 * MiB), 4 * MiB);
  EXPECT_EQ(wire::state_chunk_bytes(uint64_t(40) << 30), 4 * MiB);
}

// Helpers' ranges are guided: large while much is free, one chunk near the
// end, so the last range a slow donor holds is short.
TEST(Spread, HelpersTakeShorterRangesAsTheEndNears) {
  Stripes s;
  std::string why;
  ASSERT_TRUE(s.begin({1, 20 * MiB, uint32_t(MiB), 0}, 0, &why)) << why;  // 20 chunks
  uint32_t first = 0, count = 0;
  s.helping();  // one helper and the winner: up to 20 / 4 chunks
  ASSERT_TRUE(s.take_from_top(4, &first, &count));
  EXPECT_EQ(first, 16u);
  EXPECT_EQ(count, 4u);
  s.helping();
  s.helping();  // three helpers: 16 free over 8
  ASSERT_TRUE(s.take_from_top(4, &first, &count));
  EXPECT_EQ(first, 14u);
  EXPECT_EQ(count, 2u);
  for (size_t i = 0; i < 10; ++i) ASSERT_TRUE(s.take_in_order(i));  // the winner's stream
  ASSERT_TRUE(s.take_from_top(4, &first, &count));  // 4 free over 8: one
  EXPECT_EQ(first, 13u);
  EXPECT_EQ(count, 1u);
  s.done_helping();
  s.done_helping();
  s.done_helping();
  ASSERT_TRUE(s.take_from_top(4, &first, &count));  // 3 free, the winner alone: one
  EXPECT_EQ(count, 1u);
  ASSERT_TRUE(s.take_from_top(4, &first, &count));
  ASSERT_TRUE(s.take_from_top(4, &first, &count));
  EXPECT_EQ(first, 10u);
  EXPECT_FALSE(s.take_from_top(4, &first, &count)) << "every chunk is taken";
}

// What a server answers range requests it cannot serve, seen by a helper.
TEST(Spread, RangesAServerCannotServeAreRefused) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  const Bytes state = pattern(10 * MiB, 3);
  server.publish(50, state);
  const uint32_t crc = uint32_t(crc32_z(0, state.data(), state.size()));
  const uint32_t chunk = wire::state_chunk_bytes(state.size());  // 10 chunks of 1 MiB
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  struct Case {
    const char *name;
    StateIdentity id;
    const char *says;
  };
  const Case cases[] = {
      {"another epoch", {49, state.size(), chunk, crc}, "has epoch 50, not the one asked for"},
      {"chunks beyond its end", {50, 40 * MiB, chunk, crc}, "donor refused the request"},
      {"other bytes", {50, state.size(), chunk, crc ^ 1}, "other bytes"},
      {"another chunk size", {50, state.size(), 4u << 20, crc}, "cuts the state in chunks of 1048576 bytes, the first donor in chunks of 4194304"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.name);
    Stripes s;
    std::string why;
    ASSERT_TRUE(s.begin(c.id, 0, &why)) << why;
    EXPECT_FALSE(fetch_stripes(donor(1, server.port()), 1, kRun, &s, deadline, milliseconds(3000), nullptr, nullptr, &why));
    EXPECT_NE(why.find(c.says), std::string::npos) << why;
    EXPECT_TRUE(s.any_free()) << "a failed range must free its chunks";
  }
  // And one it can: the whole state in ranges, nothing else asked.
  Stripes s;
  std::string why;
  ASSERT_TRUE(s.begin({50, state.size(), chunk, crc}, 0, &why));
  ASSERT_TRUE(fetch_stripes(donor(1, server.port()), 1, kRun, &s, deadline, milliseconds(3000), nullptr, nullptr, &why))
      << why;
  ASSERT_TRUE(s.complete());
  EXPECT_TRUE(s.check(&why)) << why;
  EXPECT_TRUE(s.take_bytes() == state);
}

}  // namespace
}  // namespace loom_collab
