// SPDX-License-Identifier: Apache-2.0
// A group's hub (oob_hub.h): members send their signed parts of a
// communicator's exchange to the leader's state server (kStateFlagOob),
// which holds each reply until it has a part of every rank. What every
// member gets, plain and keyed; how long a reply is held when a member
// never comes; what bad parts and bad requests get.
#include <future>

#include "oob_hub.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

constexpr uint64_t kGroup = 0x5eed0f0b0b0b0b0bull;

// A member's signed part for a group of `size`.
Bytes part(const Identity &member, uint32_t rank, uint32_t size, uint64_t group = kGroup, uint64_t run = kRun) {
  OobRecord o;
  o.group_hash = group;
  o.rank = rank;
  o.size = size;
  o.payload = pattern(200 + rank, rank + 1);
  return encode(run, o, member);
}

// The ranks of the parts a reply brought (each decoded and checked).
std::vector<uint32_t> ranks_of(const std::vector<Bytes> &parts) {
  std::vector<uint32_t> out;
  for (const auto &raw : parts) {
    std::string why;
    auto r = decode_oob(kRun, raw.data(), raw.size(), &why);
    EXPECT_TRUE(r) << why;
    if (r) out.push_back(r->rank);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(OobHub, EveryMemberGetsEveryPartOnceTheLastOneArrives) {
  for (const bool keyed : {false, true}) {
    SCOPED_TRACE(keyed ? "keyed swarm" : "open swarm");
    const auto key = keyed ? std::optional(key_of(5)) : std::nullopt;
    LogSink log;
    StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key);
    auto hub = std::make_shared<OobHub>(kRun, key);
    server.set_oob_handler([hub](const Bytes &p, milliseconds hold, const std::function<bool()> &stop,
                                 std::string *why) { return hub->serve(p, hold, stop, why); });
    const Identity a, b, c;
    // Rank 0 is the hub's own member; ranks 1 and 2 ask over TCP, the last
    // one 300 ms after the others: their replies wait for it.
    const auto start = Clock::now();
    auto own = std::async(std::launch::async, [&] { return hub->exchange(part(a, 0, 3), milliseconds(5000), {}); });
    auto ask = [&](const Identity &who, uint32_t rank) {
      std::string why;
      auto got = fetch_oob("127.0.0.1", server.port(), kRun, hub->wrap(part(who, rank, 3)), milliseconds(5000),
                           milliseconds(8000), &why, key, nullptr);
      EXPECT_TRUE(got) << why;
      return got ? *got : std::vector<Bytes>{};
    };
    auto first = std::async(std::launch::async, [&] { return ask(b, 1); });
    std::this_thread::sleep_for(milliseconds(300));
    const auto last = ask(c, 2);
    const std::vector<uint32_t> all{0, 1, 2};
    EXPECT_EQ(ranks_of(own.get()), all);
    EXPECT_EQ(ranks_of(first.get()), all);
    EXPECT_EQ(ranks_of(last), all);
    EXPECT_LT(seconds_since(start), 3.0) << "a reply waited out its hold although every part had come";
    EXPECT_EQ(hub->parts(), 3u);
    // Counted once the server saw its reply taken, a moment after the client read it.
    for (int i = 0; i < 100 && server.oob_served() < 2; ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(server.oob_served(), 2u);
  }
}

TEST(OobHub, AReplyIsHeldNoLongerThanItsHoldWhenAMemberNeverComes) {
  OobHub hub(kRun, std::nullopt);
  const Identity a, b;
  std::string why;
  const auto start = Clock::now();
  auto table = hub.serve(part(a, 0, 3), milliseconds(400), {}, &why);
  ASSERT_TRUE(table) << why;
  const double held = seconds_since(start);
  EXPECT_GE(held, 0.35);
  EXPECT_LT(held, 2.0);
  std::vector<Bytes> parts;
  ASSERT_TRUE(decode_progress_table(table->data(), table->size(), &parts, &why)) << why;
  EXPECT_EQ(ranks_of(parts), std::vector<uint32_t>{0});
  // The member that comes next gets both at once: the first one's part was kept.
  table = hub.serve(part(b, 1, 3), milliseconds(400), {}, &why);
  ASSERT_TRUE(table && decode_progress_table(table->data(), table->size(), &parts, &why)) << why;
  EXPECT_EQ(ranks_of(parts), (std::vector<uint32_t>{0, 1}));
  // A stop (the server shutting down) ends the hold early.
  const auto stopped = Clock::now();
  table = hub.serve(part(b, 1, 3), milliseconds(5000), [] { return true; }, &why);
  ASSERT_TRUE(table) << why;
  EXPECT_LT(seconds_since(stopped), 1.0);
}

TEST(OobHub, GroupsOfAnotherHashOrSizeAreKeptApart) {
  OobHub hub(kRun, std::nullopt);
  const Identity a, b;
  std::string why;
  ASSERT_TRUE(hub.serve(part(a, 0, 2, kGroup), milliseconds(1), {}, &why)) << why;
  ASSERT_TRUE(hub.serve(part(a, 0, 2, kGroup + 1), milliseconds(1), {}, &why)) << why;
  ASSERT_TRUE(hub.serve(part(a, 0, 3, kGroup), milliseconds(1), {}, &why)) << why;
  auto table = hub.serve(part(b, 1, 2, kGroup), milliseconds(1000), {}, &why);
  std::vector<Bytes> parts;
  ASSERT_TRUE(table && decode_progress_table(table->data(), table->size(), &parts, &why)) << why;
  EXPECT_EQ(ranks_of(parts), (std::vector<uint32_t>{0, 1}));
  for (const auto &raw : parts) {
    auto r = decode_oob(kRun, raw.data(), raw.size(), &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->group_hash, kGroup);
    EXPECT_EQ(r->size, 2u);
  }
}

TEST(OobHub, WhatIsNoPartOfThisRunIsRefusedByName) {
  OobHub hub(kRun, std::nullopt);
  const Identity a;
  std::string why;
  EXPECT_FALSE(hub.serve(pattern(300, 9), milliseconds(10), {}, &why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;
  EXPECT_FALSE(hub.serve(part(a, 0, 2, kGroup, kRun + 1), milliseconds(10), {}, &why));
  EXPECT_NE(why.find(", this run is "), std::string::npos) << why;
  // In a keyed swarm a part must be sealed with its key.
  OobHub keyed(kRun, key_of(3));
  EXPECT_FALSE(keyed.serve(part(a, 0, 2), milliseconds(10), {}, &why));
  EXPECT_NE(why.find("does not open with this swarm's key"), std::string::npos) << why;
  EXPECT_FALSE(keyed.serve(OobHub(kRun, key_of(4)).wrap(part(a, 0, 2)), milliseconds(10), {}, &why));
  EXPECT_TRUE(keyed.serve(keyed.wrap(part(a, 0, 2)), milliseconds(10), {}, &why)) << why;
  EXPECT_EQ(hub.refused() + keyed.refused(), 4u);
}

TEST(OobHub, ForgedPartsCannotCrowdOutMoreThanTheirRank) {
  // Parts of other signers for one rank are kept (the members pick their
  // own by signature), up to kMaxSignersPerRank; the next is refused.
  OobHub hub(kRun, std::nullopt);
  std::vector<std::unique_ptr<Identity>> forgers;
  std::string why;
  for (size_t i = 0; i < OobHub::kMaxSignersPerRank; ++i) {
    forgers.push_back(std::make_unique<Identity>());
    ASSERT_TRUE(hub.serve(part(*forgers.back(), 1, 3), milliseconds(1), {}, &why)) << why;
  }
  const Identity late;
  EXPECT_FALSE(hub.serve(part(late, 1, 3), milliseconds(1), {}, &why));
  EXPECT_NE(why.find("rank 1 of group " + hex64(kGroup) + " already has 4 parts from different signers"),
            std::string::npos)
      << why;
  // Another rank is untouched, and a signer's part sent again replaces its own.
  EXPECT_TRUE(hub.serve(part(late, 2, 3), milliseconds(1), {}, &why)) << why;
  EXPECT_TRUE(hub.serve(part(*forgers.front(), 1, 3), milliseconds(1), {}, &why)) << why;
}

TEST(OobHub, TheServerRefusesBadOobRequestsByName) {
  LogSink log;
  StateServer server("127.0.0.1", 0, kRun, log.fn());
  const Identity a;
  std::string why;
  // No handler: this peer is no hub.
  EXPECT_FALSE(fetch_oob("127.0.0.1", server.port(), kRun, part(a, 0, 2), milliseconds(100), milliseconds(2000), &why,
                         std::nullopt, nullptr));
  EXPECT_NE(why.find("donor refused the request"), std::string::npos) << why;
  auto hub = std::make_shared<OobHub>(kRun, std::nullopt);
  server.set_oob_handler([hub](const Bytes &p, milliseconds hold, const std::function<bool()> &stop,
                               std::string *w) { return hub->serve(p, hold, stop, w); });
  // A push that is no part: refused, and the server says why.
  EXPECT_FALSE(fetch_oob("127.0.0.1", server.port(), kRun, pattern(100, 1), milliseconds(100), milliseconds(2000), &why,
                         std::nullopt, nullptr));
  EXPECT_NE(why.find("donor refused the request"), std::string::npos) << why;
  EXPECT_TRUE(log.has(Level::warn, {"refused", "oob request", "magic"}));
  // Holds outside 1 ms to kMaxOobHoldMs, and an oob request without its part.
  EXPECT_EQ(status_of_reply(server.port(), request_bytes(kRun, 0, kStateFlagOob | kStateFlagProgressPush)),
            int(StateStatus::bad_request));
  EXPECT_EQ(status_of_reply(server.port(), request_bytes(kRun, kMaxOobHoldMs + 1, kStateFlagOob | kStateFlagProgressPush)),
            int(StateStatus::bad_request));
  EXPECT_EQ(status_of_reply(server.port(), request_bytes(kRun, 100, kStateFlagOob)), int(StateStatus::bad_request));
  // The client's own checks.
  EXPECT_FALSE(fetch_oob("127.0.0.1", server.port(), kRun, part(a, 0, 2), milliseconds(0), milliseconds(2000), &why,
                         std::nullopt, nullptr));
  EXPECT_NE(why.find("1 to 10000 ms"), std::string::npos) << why;
  // And a good one still goes through.
  const Identity b;
  ASSERT_TRUE(hub->serve(part(b, 1, 2), milliseconds(1), {}, &why)) << why;
  auto got = fetch_oob("127.0.0.1", server.port(), kRun, part(a, 0, 2), milliseconds(1000), milliseconds(3000), &why,
                       std::nullopt, nullptr);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(ranks_of(*got), (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace loom_collab
