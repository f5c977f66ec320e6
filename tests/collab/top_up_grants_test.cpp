// SPDX-License-Identifier: Apache-2.0
// Grants of a short round's top-up (top_up_grants.h): what one ask gets,
// that a group's grants together cover its deficit and cross it by less
// than one batch however the members' asks interleave, that only the
// members of a group the hub leads may ask (signed, numbered), what bad
// asks get, and the round trip through a hub's real state server, open
// and keyed.
#include <algorithm>
#include <deque>
#include <random>

#include "oob_hub.h"
#include "state_transfer_support.hpp"

namespace loom_collab {
namespace {

using namespace transfer_test;

// A group of n members, each with a key pair of its own, ranked by id as a
// group record ranks them.
struct Members {
  explicit Members(size_t n, int64_t epoch = 3) : ids(n), seq(n, 0) {
    for (const auto &i : ids) group.members.push_back(i.id());
    std::sort(group.members.begin(), group.members.end());
    group.fingerprint = 0x5eed;
    group.leader = group.members[0];
    group.epoch = epoch;
  }
  uint64_t hash() const { return group.group_hash(); }
  const Identity &of(uint32_t rank) const {
    for (const auto &i : ids)
      if (i.id() == group.members[rank]) return i;
    throw std::logic_error("no such rank");
  }
  // rank's next ask, as the hub reads it (signed by rank's member).
  GrantAsk ask(uint32_t rank, double deficit, uint64_t batch, double share, uint64_t least = 0) {
    GrantAsk a;
    a.group_hash = hash();
    a.size = uint32_t(group.members.size());
    a.rank = rank;
    a.deficit = deficit;
    a.batch = batch;
    a.share = share;
    a.min_samples = least;
    a.seq = ++seq[rank];
    a.signer = group.members[rank];
    return a;
  }
  std::deque<Identity> ids;
  GroupRecord group;
  std::vector<uint32_t> seq;
};

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
    Members m(8);
    ledger.lead(m.group);
    std::mt19937 rng(7);
    const std::vector<double> shares{0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05};
    std::discrete_distribution<uint32_t> who(shares.begin(), shares.end());
    double granted = 0;
    uint64_t asks = 0, zeros = 0;
    std::string why;
    while (zeros < 8) {
      const uint32_t r = who(rng);
      // Some members have measured their round trips, and ask for at least that much.
      auto g = ledger.grant(m.ask(r, deficit, 64, shares[r], (r % 3) * 1000), &why);
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

TEST(GrantLedger, EachGroupItLeadsHasItsOwnBooksAndLeadingAgainKeepsThem) {
  GrantLedger ledger;
  Members a(2), b(2, 4), c(3);
  for (const auto *m : {&a, &b, &c}) ledger.lead(m->group);
  std::string why;
  ASSERT_EQ(ledger.grant(a.ask(0, 64, 64, 1.0), &why)->samples, 64u) << why;
  ledger.lead(a.group);  // a leader that closes the same group again (matchmaking retried its put)
  EXPECT_EQ(ledger.grant(a.ask(1, 64, 64, 1.0), &why)->samples, 0u) << "the group's deficit was given out";
  EXPECT_EQ(ledger.grant(b.ask(0, 64, 64, 1.0), &why)->samples, 64u) << "another epoch, another group";
  EXPECT_EQ(ledger.grant(c.ask(0, 64, 64, 1.0), &why)->samples, 64u) << "other members, another group";
}

TEST(GrantLedger, AnAskNamingAnotherDeficitIsRefusedByName) {
  GrantLedger ledger;
  Members m(4);
  ledger.lead(m.group);
  std::string why;
  ASSERT_TRUE(ledger.grant(m.ask(0, 6400, 64, 0.25), &why)) << why;
  EXPECT_FALSE(ledger.grant(m.ask(1, 6464, 64, 0.25), &why));
  EXPECT_NE(why.find("names a deficit of 6464"), std::string::npos) << why;
  EXPECT_NE(why.find("its first ask named 6400"), std::string::npos) << why;
}

TEST(GrantLedger, OnlyTheMembersOfAGroupItLeadsMayAskEachAskOnce) {
  GrantLedger ledger;
  Members m(3);
  ledger.lead(m.group);
  std::string why;
  struct Refused {
    const char *name;
    GrantAsk ask;
    const char *says;
  };
  Members stranger(3);  // a group this hub never led
  GrantAsk forged = m.ask(1, 6400, 64, 0.5);
  forged.signer = m.group.members[2];  // rank 2's member asking as rank 1
  GrantAsk outsider = m.ask(1, 6400, 64, 0.5);
  outsider.signer = Identity().id();
  GrantAsk other_size = m.ask(1, 6400, 64, 0.5);
  other_size.size = 4;  // the same hash, another size: no group it leads
  std::vector<Refused> refused{
      {"a group it does not lead", stranger.ask(0, 6400, 64, 0.5), "which this hub does not lead"},
      {"another size", other_size, "which this hub does not lead"},
      {"signed by another member", forged, "that rank is peer"},
      {"signed by an outsider", outsider, "signed by peer"},
  };
  for (const auto &x : refused) {
    SCOPED_TRACE(x.name);
    why.clear();
    EXPECT_FALSE(ledger.grant(x.ask, &why));
    EXPECT_NE(why.find(x.says), std::string::npos) << why;
  }
  EXPECT_NE(why.find(std::to_string(outsider.signer)), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(m.group.members[1])), std::string::npos) << "names the rank's member: " << why;
  // A member's own ask, then the same ask again (replayed) and an older one.
  const GrantAsk first = m.ask(1, 6400, 64, 0.5);
  auto g = ledger.grant(first, &why);
  ASSERT_TRUE(g) << why;
  EXPECT_FALSE(ledger.grant(first, &why));
  const std::string again = "ask " + std::to_string(first.seq) + " of rank 1";
  EXPECT_NE(why.find(again), std::string::npos) << why;
  EXPECT_NE(why.find("replayed"), std::string::npos) << why;
  GrantAsk older = first;
  older.seq = 1;
  EXPECT_FALSE(ledger.grant(older, &why));
  // None of those took anything: the group's first grant was a full one.
  EXPECT_EQ(g->samples, grant_size(6400, 0.5, 64));
  EXPECT_EQ(ledger.asks(), 1u);
  // Made-up groups crowd nothing out: refused, they never enter the books.
  for (int i = 0; i < 600; ++i) EXPECT_FALSE(ledger.grant(Members(2, 1000 + i).ask(0, 64, 64, 1.0), &why));
  EXPECT_TRUE(ledger.grant(m.ask(2, 6400, 64, 0.5), &why)) << why;
}

TEST(GrantWire, AsksAndGrantsRoundTripAndBadOnesAreNamed) {
  std::string why;
  Members m(8);
  const GrantAsk a = m.ask(3, 123456.0, 64, 0.125, 777);
  const Bytes b = encode_grant_ask(kRun, a, m.of(3));
  EXPECT_TRUE(is_grant_ask(b));
  auto back = decode_grant_ask(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->group_hash, a.group_hash);
  EXPECT_EQ(back->rank, 3u);
  EXPECT_EQ(back->size, 8u);
  EXPECT_EQ(back->deficit, 123456.0);
  EXPECT_EQ(back->batch, 64u);
  EXPECT_EQ(back->share, 0.125);
  EXPECT_EQ(back->min_samples, 777u);
  EXPECT_EQ(back->seq, a.seq);
  EXPECT_EQ(back->signer, m.group.members[3]) << "the signer comes from the signature";
  const Bytes g = encode_grant({640, 99.5});
  EXPECT_FALSE(is_grant_ask(g));
  OobRecord part;
  part.group_hash = a.group_hash;
  part.size = 8;
  EXPECT_FALSE(is_grant_ask(encode(kRun, part, m.of(0)))) << "an oob part is no ask";
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
  flipped[30] ^= 1;
  auto version = b;
  version[4] = 10;
  auto ask = [&](GrantAsk x) { return encode_grant_ask(kRun, x, m.of(0)); };
  auto with = [&](auto change) {
    GrantAsk x = m.ask(0, 64, 64, 0.5);
    change(x);
    return ask(x);
  };
  std::vector<Bad> bad{
      {"short", Bytes(b.begin(), b.end() - 1), "truncated"},
      {"a grant, not an ask", g, "not a Loom swarm record"},
      {"an oob part", encode(kRun, part, m.of(0)), "not a grant ask record: an oob record"},
      {"a bit flipped", flipped, "bad checksum"},
      {"another version", version, "version 10"},
      {"another run", encode_grant_ask(kRun + 1, a, m.of(3)), "record of run"},
      {"rank past the group", with([](GrantAsk &x) { x.rank = 8, x.size = 8; }), "rank 8 of a group of 8"},
      {"a group of one", with([](GrantAsk &x) { x.size = 1; }), "a group has 2 to"},
      {"no deficit", with([](GrantAsk &x) { x.deficit = 0; }), "a deficit of"},
      {"a deficit not a number", with([](GrantAsk &x) { x.deficit = std::nan(""); }), "a deficit of"},
      {"a batch of 0", with([](GrantAsk &x) { x.batch = 0; }), "in batches of 0"},
      {"a share over 1", with([](GrantAsk &x) { x.share = 1.5; }), "a share of"},
      {"a share of 0", with([](GrantAsk &x) { x.share = 0; }), "a share of"},
      {"a least past 2^53", with([](GrantAsk &x) { x.min_samples = uint64_t(1) << 60; }), "at least"},
      {"numbered 0", with([](GrantAsk &x) { x.seq = 0; }), "numbered 0"},
  };
  for (const auto &x : bad) {
    SCOPED_TRACE(x.name);
    why.clear();
    EXPECT_FALSE(decode_grant_ask(kRun, x.bytes.data(), x.bytes.size(), &why));
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
    Members m(3);
    hub->lead(m.group);
    auto pushed = [&](const GrantAsk &a, const Identity &signer) { return hub->wrap(encode_grant_ask(kRun, a, signer)); };
    std::string why;
    // Rank 0 is the hub's own member, ranks 1 and 2 ask over TCP, until all is given out.
    double granted = 0;
    int zeros = 0;
    for (int i = 0; zeros < 3 && i < 100; ++i) {
      const uint32_t rank = uint32_t(i % 3);
      const GrantAsk a = m.ask(rank, 6400, 64, 1.0 / 3);
      auto g = rank == 0 ? hub->grant(a, &why)
                         : fetch_grant("127.0.0.1", server.port(), kRun, pushed(a, m.of(rank)), milliseconds(5000),
                                       &why, key);
      ASSERT_TRUE(g) << why;
      granted += double(g->samples);
      zeros += g->samples == 0;
    }
    EXPECT_GE(granted, 6400.0);
    EXPECT_LT(granted, 6400.0 + 64);
    // An ask the hub refuses (another deficit) fails by name at the member.
    EXPECT_FALSE(fetch_grant("127.0.0.1", server.port(), kRun, pushed(m.ask(1, 1, 64, 0.5), m.of(1)),
                             milliseconds(5000), &why, key));
    EXPECT_NE(why.find("refused"), std::string::npos) << why;
    EXPECT_TRUE(log.has(Level::warn, {"grant ask", "names a deficit of 1", "its first ask named 6400"}));
    // So does one signed by a peer that is not the member at its rank.
    const Identity outsider;
    EXPECT_FALSE(fetch_grant("127.0.0.1", server.port(), kRun, pushed(m.ask(2, 6400, 64, 0.5), outsider),
                             milliseconds(5000), &why, key));
    const std::string signed_by = "signed by peer " + std::to_string(outsider.id());
    EXPECT_TRUE(log.has(Level::warn, {"grant ask", signed_by.c_str()}));
    EXPECT_EQ(hub->refused(), 2u);
    if (keyed) {
      // An ask sealed with another key does not open.
      EXPECT_FALSE(fetch_grant("127.0.0.1", server.port(), kRun,
                               OobHub(kRun, key_of(7)).wrap(encode_grant_ask(kRun, m.ask(1, 6400, 64, 0.5), m.of(1))),
                               milliseconds(5000), &why, key));
      EXPECT_EQ(hub->refused(), 3u);
    }
  }
}

}  // namespace
}  // namespace loom_collab
