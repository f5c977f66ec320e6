// SPDX-License-Identifier: Apache-2.0
// Grants of a short round's top-up (top_up_grants.h): what one ask gets,
// that a group's grants together cover its deficit and cross it by less
// than one batch however the members' asks interleave, what bad asks get,
// and the round trip through a hub's real state server, open and keyed.
#include <random>

#include "oob_hub.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

constexpr uint64_t kGroup = 0x6a0f7e5700c0ffeeull;

GrantAsk ask_of(uint32_t rank, uint32_t size, double deficit, uint64_t batch, double share, uint64_t group = kGroup,
                uint64_t least = 0) {
  GrantAsk a;
  a.min_samples = least;
  a.group_hash = group;
  a.size = size;
  a.rank = rank;
  a.deficit = deficit;
  a.batch = batch;
  a.share = share;
  return a;
}

TEST(GrantSize, AFractionOfWhatIsLeftInWholeBatchesAndAtLeastOne) {
  // 100,000 left, a quarter of the group's rate, half of that: 12,500, down to 195 batches of 64.
  EXPECT_EQ(grant_size(100000, 0.25, 64), 195u * 64);
  EXPECT_EQ(grant_size(100, 0.25, 64), 64u);  // less than a batch's worth: one batch
  EXPECT_EQ(grant_size(1, 1.0, 64), 64u);
  EXPECT_EQ(grant_size(0, 0.25, 64), 0u);  // nothing left: nothing, the group meets
  EXPECT_EQ(grant_size(-64, 0.25, 64), 0u);
  EXPECT_EQ(grant_size(100000, 0.0, 64), grant_size(100000, 1.0, 64)) << "a share out of range counts as all";
  EXPECT_EQ(grant_size(100000, 0.25, 0), 12500u) << "a batch of 0 counts as 1";
  // A least (what the asker trains in two round trips to the hub) raises a
  // small grant to whole batches, but never past what is left.
  EXPECT_EQ(grant_size(100000, 0.01, 64, 3000), 47u * 64);
  EXPECT_EQ(grant_size(100000, 0.25, 64, 3000), 195u * 64) << "the fraction was more already";
  EXPECT_EQ(grant_size(1000, 0.01, 64, 3000), 16u * 64) << "what is left, in whole batches";
}

TEST(GrantLedger, AGroupsGrantsCoverItsDeficitAndCrossItByLessThanABatch) {
  // Eight members of different speeds ask in a random order, the fast ones
  // more often, as on a loaded machine; every grant comes in whole batches.
  for (const double deficit : {1.0, 63.0, 64.0, 5000.0, 917504.0}) {
    SCOPED_TRACE("deficit " + std::to_string(deficit));
    GrantLedger ledger;
    std::mt19937 rng(7);
    const std::vector<double> shares{0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05};
    std::discrete_distribution<uint32_t> who(shares.begin(), shares.end());
    double granted = 0;
    uint64_t asks = 0, zeros = 0;
    std::string why;
    while (zeros < 8) {
      const uint32_t r = who(rng);
      // Some members have measured their round trips, and ask for at least that much.
      auto g = ledger.grant(ask_of(r, 8, deficit, 64, shares[r], kGroup, (r % 3) * 1000), &why);
      ASSERT_TRUE(g) << why;
      ++asks;
      EXPECT_EQ(g->samples % 64, 0u);
      if (g->samples == 0) {
        ++zeros;
        EXPECT_EQ(g->left, 0.0);
      }
      granted += double(g->samples);
      EXPECT_EQ(g->left, std::max(0.0, deficit - granted));
    }
    EXPECT_GE(granted, deficit);
    EXPECT_LT(granted, deficit + 64);
    EXPECT_EQ(ledger.asks(), asks);
    if (deficit == 917504.0) {
      EXPECT_LT(asks, 200u) << "the pieces shrink too slowly";
    }
  }
}

TEST(GrantLedger, GroupsOfAnotherHashOrSizeHaveTheirOwnBooks) {
  GrantLedger ledger;
  std::string why;
  ASSERT_EQ(ledger.grant(ask_of(0, 2, 64, 64, 1.0), &why)->samples, 64u) << why;
  EXPECT_EQ(ledger.grant(ask_of(1, 2, 64, 64, 1.0), &why)->samples, 0u) << "the group's deficit was given out";
  EXPECT_EQ(ledger.grant(ask_of(0, 3, 64, 64, 1.0), &why)->samples, 64u) << "another size, another group";
  EXPECT_EQ(ledger.grant(ask_of(0, 2, 64, 64, 1.0, kGroup + 1), &why)->samples, 64u) << "another hash";
}

TEST(GrantLedger, AnAskNamingAnotherDeficitIsRefusedByName) {
  GrantLedger ledger;
  std::string why;
  ASSERT_TRUE(ledger.grant(ask_of(0, 4, 6400, 64, 0.25), &why)) << why;
  EXPECT_FALSE(ledger.grant(ask_of(1, 4, 6464, 64, 0.25), &why));
  EXPECT_NE(why.find("names a deficit of 6464"), std::string::npos) << why;
  EXPECT_NE(why.find("its first ask named 6400"), std::string::npos) << why;
}

TEST(GrantWire, AsksAndGrantsRoundTripAndBadOnesAreNamed) {
  std::string why;
  const GrantAsk a = ask_of(3, 8, 123456.0, 64, 0.125, kGroup, 777);
  const Bytes b = encode_grant_ask(a);
  EXPECT_TRUE(is_grant_ask(b));
  auto back = decode_grant_ask(b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->group_hash, a.group_hash);
  EXPECT_EQ(back->rank, 3u);
  EXPECT_EQ(back->size, 8u);
  EXPECT_EQ(back->deficit, 123456.0);
  EXPECT_EQ(back->batch, 64u);
  EXPECT_EQ(back->share, 0.125);
  EXPECT_EQ(back->min_samples, 777u);
  const Bytes g = encode_grant({640, 99.5});
  EXPECT_FALSE(is_grant_ask(g));
  auto grant = decode_grant(g.data(), g.size(), &why);
  ASSERT_TRUE(grant) << why;
  EXPECT_EQ(grant->samples, 640u);
  EXPECT_EQ(grant->left, 99.5);

  struct Bad {
    const char *name;
    Bytes bytes;
    const char *says;
  };
  auto flipped = b;
  flipped[10] ^= 1;
  auto version = b;
  version[4] = 9;
  std::vector<Bad> bad{
      {"short", Bytes(b.begin(), b.end() - 1), "not a grant ask"},
      {"a grant, not an ask", g, "not a grant ask"},
      {"a bit flipped", flipped, "bad checksum"},
      {"another version", version, "of version 9"},
      {"rank past the group", encode_grant_ask(ask_of(8, 8, 64, 64, 0.5)), "rank 8 of a group of 8"},
      {"a group of one", encode_grant_ask(ask_of(0, 1, 64, 64, 0.5)), "a group has 2 to"},
      {"no deficit", encode_grant_ask(ask_of(0, 2, 0, 64, 0.5)), "a deficit of"},
      {"a deficit not a number", encode_grant_ask(ask_of(0, 2, std::nan(""), 64, 0.5)), "a deficit of"},
      {"a batch of 0", encode_grant_ask(ask_of(0, 2, 64, 0, 0.5)), "in batches of 0"},
      {"a share over 1", encode_grant_ask(ask_of(0, 2, 64, 64, 1.5)), "a share of"},
      {"a share of 0", encode_grant_ask(ask_of(0, 2, 64, 64, 0)), "a share of"},
      {"a least past 2^53", encode_grant_ask(ask_of(0, 2, 64, 64, 0.5, kGroup, uint64_t(1) << 60)), "at least"},
  };
  for (const auto &x : bad) {
    SCOPED_TRACE(x.name);
    why.clear();
    EXPECT_FALSE(decode_grant_ask(x.bytes.data(), x.bytes.size(), &why));
    EXPECT_NE(why.find(x.says), std::string::npos) << why;
  }
  auto grant_flipped = g;
  grant_flipped[6] ^= 1;
  EXPECT_FALSE(decode_grant(grant_flipped.data(), grant_flipped.size(), &why));
  EXPECT_NE(why.find("bad checksum"), std::string::npos) << why;
}

TEST(GrantHub, MembersGetGrantsFromTheLeadersServerOpenAndKeyed) {
  for (const bool keyed : {false, true}) {
    SCOPED_TRACE(keyed ? "keyed swarm" : "open swarm");
    const auto key = keyed ? std::optional(key_of(6)) : std::nullopt;
    LogSink log;
    StateServer server("127.0.0.1", 0, kRun, log.fn(), ServeLimits(), key);
    auto hub = std::make_shared<OobHub>(kRun, key);
    server.set_oob_handler([hub](const Bytes &p, milliseconds hold, const std::function<bool()> &stop,
                                 std::string *why) { return hub->serve(p, hold, stop, why); });
    std::string why;
    // Rank 0 is the hub's own member, ranks 1 and 2 ask over TCP, until all is given out.
    double granted = 0;
    int zeros = 0;
    for (int i = 0; zeros < 3 && i < 100; ++i) {
      const uint32_t rank = uint32_t(i % 3);
      const GrantAsk a = ask_of(rank, 3, 6400, 64, 1.0 / 3);
      auto g = rank == 0 ? hub->grant(a, &why)
                         : fetch_grant("127.0.0.1", server.port(), kRun, hub->wrap(encode_grant_ask(a)),
                                       milliseconds(5000), &why, key);
      ASSERT_TRUE(g) << why;
      granted += double(g->samples);
      zeros += g->samples == 0;
    }
    EXPECT_GE(granted, 6400.0);
    EXPECT_LT(granted, 6400.0 + 64);
    // An ask the hub refuses (another deficit) fails by name at the member.
    EXPECT_FALSE(fetch_grant("127.0.0.1", server.port(), kRun, hub->wrap(encode_grant_ask(ask_of(1, 3, 1, 64, 0.5))),
                             milliseconds(5000), &why, key));
    EXPECT_NE(why.find("refused"), std::string::npos) << why;
    EXPECT_TRUE(log.has(Level::warn, {"grant ask", "names a deficit of 1", "its first ask named 6400"}));
    EXPECT_EQ(hub->refused(), 1u);
    if (keyed) {
      // An ask sealed with another key does not open.
      EXPECT_FALSE(fetch_grant("127.0.0.1", server.port(), kRun,
                               OobHub(kRun, key_of(7)).wrap(encode_grant_ask(ask_of(1, 3, 6400, 64, 0.5))),
                               milliseconds(5000), &why, key));
      EXPECT_EQ(hub->refused(), 2u);
    }
  }
}

}  // namespace
}  // namespace loom_collab
