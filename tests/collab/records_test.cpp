// SPDX-License-Identifier: Apache-2.0
// The swarm's wire records: round trips, and every malformed input refused
// with its reason (never half-read, never a crash).
#include "records.h"
#include "records_support.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>

namespace loom_collab {
namespace {

using namespace records_test;

TEST(Records, RunHashIsFnv1a) {
  EXPECT_EQ(run_hash(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(run_hash("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_NE(run_hash("run-1"), run_hash("run-2"));
}

TEST(Records, ProgressRoundTrip) {
  ProgressRecord p = sample_progress();
  p.state_host.assign(255, 'h');  // the longest host allowed
  p.state_port = 65535;
  p.time_ms = -1;
  const Bytes b = encode(kRun, p, me());
  std::string why;
  auto back = decode_progress(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->peer_id, p.peer_id);
  EXPECT_EQ(back->epoch, p.epoch);
  EXPECT_EQ(back->samples, p.samples);
  EXPECT_EQ(back->samples_per_second, p.samples_per_second);
  EXPECT_EQ(back->time_ms, p.time_ms);
  EXPECT_EQ(back->flags, p.flags);
  EXPECT_EQ(back->state_host, p.state_host);
  EXPECT_EQ(back->state_port, p.state_port);
  EXPECT_EQ(back->fingerprint, p.fingerprint);
  EXPECT_EQ(back->since_ms, p.since_ms);
  EXPECT_EQ(back->sync_epoch, p.sync_epoch);
  EXPECT_EQ(back->sync_hash, p.sync_hash);
  EXPECT_EQ(back->earlier_syncs, p.earlier_syncs);
  EXPECT_EQ(back->target_batch_size, p.target_batch_size);
  EXPECT_EQ(back->last_loss, p.last_loss);
  EXPECT_EQ(back->loss_epoch, p.loss_epoch);
  EXPECT_EQ(back->epoch_loss, p.epoch_loss);
  EXPECT_EQ(back->loss_windows, p.loss_windows);
  EXPECT_EQ(back->last_round.epoch, p.last_round.epoch);
  EXPECT_EQ(back->last_round.group, p.last_round.group);
  EXPECT_EQ(back->last_round.members, p.last_round.members);
  EXPECT_EQ(back->last_round.samples, p.last_round.samples);
  EXPECT_EQ(back->last_round.matchmaking_ms, p.last_round.matchmaking_ms);
  EXPECT_EQ(back->last_round.round_ms, p.last_round.round_ms);
}

TEST(Records, ProgressCarriesWhatALossWasEvenWhenItWasNotFinite) {
  // A diverging peer's loss is what an observer most needs to see.
  for (float loss : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -2.5f}) {
    ProgressRecord p = sample_progress();
    p.last_loss = loss;
    p.epoch_loss = loss;
    const Bytes b = encode(kRun, p, me());
    std::string why;
    auto back = decode_progress(kRun, b.data(), b.size(), &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(std::isnan(back->last_loss), std::isnan(loss));
    if (!std::isnan(loss)) {
      EXPECT_EQ(back->epoch_loss, loss);
    }
  }
  ProgressRecord fresh;  // a peer that has not trained yet
  fresh.peer_id = me().id();
  const Bytes b = encode(kRun, fresh, me());
  std::string why;
  auto back = decode_progress(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->loss_epoch, -1);
  EXPECT_EQ(back->last_round.epoch, -1);
  EXPECT_TRUE(std::isnan(back->last_loss));
}

TEST(Records, RejectsOutOfRangeObserverFields) {
  std::string why;
  auto bad = [&](const ObserverFields &o) {
    const Bytes b = frame(1, progress_payload("h", 1.0, 1, 0, me().id(), 0, {}, o));
    EXPECT_FALSE(decode_progress(kRun, b.data(), b.size(), &why));
    return why;
  };
  const Bytes ok = frame(1, progress_payload("h", 1.0));
  EXPECT_TRUE(decode_progress(kRun, ok.data(), ok.size(), &why)) << why;
  ObserverFields o;
  o.target = 0;
  EXPECT_EQ(bad(o), "target_batch_size is 0");
  o = {};
  o.loss_epoch = 2;  // the record's epoch is 1
  EXPECT_EQ(bad(o), "loss_epoch 2 is outside -1..1 (its epoch)");
  o.loss_epoch = -2;
  EXPECT_EQ(bad(o), "loss_epoch -2 is outside -1..1 (its epoch)");
  o = {};
  o.round_epoch = 5;
  EXPECT_EQ(bad(o), "the last round's epoch 5 is outside -1..1 (its epoch)");
  o = {};
  o.round_members = 0;
  EXPECT_EQ(bad(o), "the last round has 0 members (1..4096)");
  o.round_members = 4097;
  EXPECT_EQ(bad(o), "the last round has 4097 members (1..4096)");
  for (float t : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    o = {};
    o.round_ms = t;
    EXPECT_EQ(bad(o), "the last round's times are not finite durations >= 0");
    o = {};
    o.matchmaking_ms = t;
    EXPECT_EQ(bad(o), "the last round's times are not finite durations >= 0");
  }
  o = {};
  o.round_epoch = -1;  // no round yet: no members needed
  o.round_members = 0;
  const Bytes none = frame(1, progress_payload("h", 1.0, 1, 0, me().id(), 0, {}, o));
  EXPECT_TRUE(decode_progress(kRun, none.data(), none.size(), &why)) << why;
}

TEST(Records, ProgressIsLittleEndianOnTheWire) {
  ProgressRecord p;
  p.peer_id = me().id();
  p.epoch = 0x0807060504030201LL;
  const Bytes b = encode(kRun, p, me());
  ASSERT_GE(b.size(), 34u);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "LMSW");
  EXPECT_EQ(b[4], 11);  // format version
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[18 + i], uint8_t(me().id() >> (8 * i)));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[26 + i], i + 1);
  // The trailer: the signer's public key, then its signature.
  EXPECT_TRUE(std::equal(me().public_key().begin(), me().public_key().end(), b.end() - 100));
}

TEST(Records, JoinRoundTrip) {
  JoinRecord j{me().id(), 123456789012LL, 4000000000u, 1700000000999LL};
  j.kept = 0xfedcba9876543210ULL;
  j.kept_size = 4096;
  const Bytes b = encode(kRun, j, me());
  std::string why;
  auto back = decode_join(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->peer_id, j.peer_id);
  EXPECT_EQ(back->epoch, j.epoch);
  EXPECT_EQ(back->attempt, j.attempt);
  EXPECT_EQ(back->time_ms, j.time_ms);
  EXPECT_EQ(back->kept, j.kept);
  EXPECT_EQ(back->kept_size, j.kept_size);
}

// A join's kept communicator (kept_comm.h) is a round hash and a size, both
// or neither, of at most the member limit.
TEST(Records, AJoinsKeptCommunicatorNeedsItsHashAndASizeInRange) {
  JoinRecord j{me().id(), 1, 0, 1700000000999LL};
  j.kept = 5;
  EXPECT_THROW(encode(kRun, j, me()), std::invalid_argument);
  const Bytes good = encode(kRun, JoinRecord{me().id(), 1, 0, 1700000000999LL, 5, 3}, me());
  auto forged = [&](uint64_t kept, uint32_t size) {
    Bytes p = payload_of(good);
    for (int i = 0; i < 8; ++i) p[28 + size_t(i)] = uint8_t(kept >> (8 * i));
    for (int i = 0; i < 4; ++i) p[36 + size_t(i)] = uint8_t(size >> (8 * i));
    const Bytes f = frame(good[5], p);
    std::string why;
    EXPECT_FALSE(decode_join(kRun, f.data(), f.size(), &why));
    return why;
  };
  EXPECT_EQ(forged(0, 3), "a kept communicator needs both its round's hash and its size");
  EXPECT_EQ(forged(5, 0), "a kept communicator needs both its round's hash and its size");
  EXPECT_EQ(forged(5, 4097), "kept communicator of 4097 members, more than 4096");
}

TEST(Records, GroupRoundTripUpToTheMemberLimit) {
  for (size_t n : {size_t{1}, size_t{4}, size_t{4096}}) {
    GroupRecord g = sample_group();
    g.members.clear();
    for (size_t i = 0; i < n; ++i) g.members.push_back(i * 3 + 1);
    g.reuse = n == 4 ? 0x0123456789abcdefULL : 0;
    if (n == 4) {
      g.hub_host = "10.1.2.3";
      g.hub_port = 47001;
    }
    const Bytes b = encode(kRun, g, me());
    std::string why;
    auto back = decode_group(kRun, b.data(), b.size(), &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->leader, g.leader);
    EXPECT_EQ(back->epoch, g.epoch);
    EXPECT_EQ(back->attempt, g.attempt);
    EXPECT_EQ(back->members, g.members);
    EXPECT_EQ(back->reuse, g.reuse);
    EXPECT_EQ(back->hub_host, g.hub_host);
    EXPECT_EQ(back->hub_port, g.hub_port);
    EXPECT_EQ(back->group_hash(), g.group_hash());
  }
}

TEST(Records, AGroupsHubNeedsBothAHostAndAPort) {
  GroupRecord g = sample_group();
  g.hub_host = "10.1.2.3";
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);  // no port
  g.hub_host.clear();
  g.hub_port = 7;
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);  // no host
  // Built by hand: decode names what is missing.
  auto forged = [&](const std::string &host, uint16_t port) {
    const Bytes b = frame(3, group_payload_of(g, host, port));
    std::string why;
    return decode_group(kRun, b.data(), b.size(), &why) ? std::string("accepted") : why;
  };
  EXPECT_EQ(forged("", 47001), "hub port 47001 without a host");
  EXPECT_EQ(forged("10.1.2.3", 0), "hub host 10.1.2.3 without a port");
  EXPECT_EQ(forged("10.1.2.3", 47001), "accepted");
  EXPECT_EQ(forged("", 0), "accepted");
}

TEST(Records, GroupHashDependsOnEpochAttemptMembersAndReuseOnly) {
  const GroupRecord g = sample_group();
  GroupRecord other_leader = g;
  other_leader.leader = 99;
  EXPECT_EQ(g.group_hash(), other_leader.group_hash());
  GroupRecord hub = g;  // where the exchange goes names no member
  hub.hub_host = "10.1.2.3";
  hub.hub_port = 47001;
  EXPECT_EQ(g.group_hash(), hub.group_hash());
  GroupRecord e = g, a = g, m = g, fewer = g, kept = g;
  e.epoch += 1;
  a.attempt += 1;
  m.members[1] += 1;
  fewer.members.pop_back();
  kept.reuse = 7;  // a group over a kept communicator is another group
  for (const GroupRecord *x : {&e, &a, &m, &fewer, &kept}) EXPECT_NE(x->group_hash(), g.group_hash());
  // Members 1..n as one list vs. shifted: neighbouring lists hash far apart.
  EXPECT_NE(g.group_hash() >> 32, m.group_hash() >> 32);
}


TEST(Records, RejectsEveryTruncation) {
  for (const Kind &k : all_kinds()) {
    for (size_t n = 0; n < k.valid.size(); ++n) {
      const Bytes cut(k.valid.begin(), k.valid.begin() + n);
      const std::string why = rejection(k, cut);
      EXPECT_NE(why.find("truncated: " + std::to_string(n) + " of "), std::string::npos) << k.name << " " << why;
      if (n >= 22) {  // the header is whole: the total length is known
        EXPECT_NE(why.find(" of " + std::to_string(k.valid.size()) + " bytes"), std::string::npos) << why;
      }
    }
  }
}

TEST(Records, RejectsEverySingleBitFlip) {
  for (const Kind &k : all_kinds()) {
    std::string why;
    ASSERT_TRUE(k.decode(k.valid, &why)) << k.name << ": " << why;
    for (size_t bit = 0; bit < k.valid.size() * 8; ++bit) {
      Bytes b = k.valid;
      b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      rejection(k, b);
    }
  }
}

TEST(Records, RejectsTrailingBytes) {
  for (const Kind &k : all_kinds()) {
    Bytes b = k.valid;
    b.push_back(0);
    EXPECT_NE(rejection(k, b).find("1 trailing bytes after a record of " + std::to_string(k.valid.size())),
              std::string::npos);
  }
}

TEST(Records, RejectsBadMagicVersionAndChecksum) {
  const Kind k = all_kinds()[0];
  Bytes b = k.valid;
  b[0] = 'X';
  EXPECT_NE(rejection(k, b).find("bad magic"), std::string::npos);
  EXPECT_NE(rejection(k, Bytes{'L', 'M', 'X'}).find("bad magic"), std::string::npos);
  EXPECT_NE(rejection(k, Bytes{'{', '"'}).find("bad magic"), std::string::npos);

  const Bytes payload = payload_of(k.valid);
  EXPECT_NE(rejection(k, frame(1, payload, kRun, 1)).find("unknown record format version 1 (this build reads 11)"),
            std::string::npos);

  b = k.valid;
  b[20] ^= 0x10;  // inside the payload
  EXPECT_NE(rejection(k, b).find("bad checksum (stored 0x"), std::string::npos);
  b = k.valid;
  b.back() ^= 0x80;  // the CRC itself
  EXPECT_NE(rejection(k, b).find("bad checksum"), std::string::npos);

  std::string why;
  EXPECT_FALSE(decode_progress(kRun, nullptr, 0, &why));
  EXPECT_NE(why.find("truncated: 0 of"), std::string::npos);
  EXPECT_FALSE(decode_progress(kRun, nullptr, 0, nullptr));  // why is optional
}

TEST(Records, RejectsAnotherKind) {
  const auto kinds = all_kinds();
  for (const Kind &reader : kinds) {
    for (const Kind &writer : kinds) {
      if (reader.name == writer.name) continue;
      auto a = [](const char *name) { return std::string(name[0] == 'o' ? "an " : "a ") + name + " record"; };
      EXPECT_EQ(rejection(reader, writer.valid), "not " + a(reader.name) + ": " + a(writer.name));
    }
  }
  EXPECT_EQ(rejection(kinds[0], frame(9, {})), "not a progress record: unknown kind 9");
}

TEST(Records, RejectsAnotherRun) {
  const uint64_t other = run_hash("other-run");
  for (const Kind &k : all_kinds()) {
    const Bytes payload = payload_of(k.valid);
    char expected[128];
    std::snprintf(expected, sizeof expected, "record of run 0x%016llx, this run is 0x%016llx",
                  static_cast<unsigned long long>(other), static_cast<unsigned long long>(kRun));
    EXPECT_EQ(rejection(k, frame(k.valid[5], payload, other)), expected);
  }
}

TEST(Records, RejectsAnOversizedPayloadLengthBeforeReadingIt) {
  Frame f;
  for (char c : std::string("LMSW")) f.u8(static_cast<uint8_t>(c));
  f.u8(11);  // the format version
  f.u8(1);
  f.u64(kRun);
  f.u32(0xffffffffu);
  f.u32(0);
  const Kind k = all_kinds()[0];
  EXPECT_NE(rejection(k, f.b).find("payload length 4294967295 exceeds the limit"), std::string::npos);
}

TEST(Records, RejectsOutOfRangeProgressFields) {
  std::string why;
  auto bad = [&](const Bytes &payload) {
    const Bytes b = frame(1, payload);
    EXPECT_FALSE(decode_progress(kRun, b.data(), b.size(), &why));
    return why;
  };
  const Bytes ok = frame(1, progress_payload("host", 1.0));
  EXPECT_TRUE(decode_progress(kRun, ok.data(), ok.size(), &why)) << why;
  EXPECT_EQ(bad(progress_payload(std::string(256, 'h'), 1.0)), "state_host is 256 bytes, longer than 255");
  EXPECT_NE(bad(progress_payload("h", std::nan(""))).find("not a finite rate"), std::string::npos);
  EXPECT_NE(bad(progress_payload("h", -1.0)).find("not a finite rate"), std::string::npos);
  EXPECT_NE(bad(progress_payload("h", std::numeric_limits<double>::infinity())).find("not a finite rate"),
            std::string::npos);
  EXPECT_EQ(bad(progress_payload("h", 1.0, -1)), "epoch -1 is negative");
  EXPECT_EQ(bad(progress_payload("h", 1.0, 1, 3)), "3 unread bytes at the end of the payload");
  // Earlier sync points: at most three, epochs decreasing below sync_epoch (0 here), hashes non-zero.
  auto with_syncs = [](uint8_t n, std::vector<std::pair<int64_t, uint64_t>> points) {
    Frame f;
    for (const auto &[epoch, hash] : points) {
      f.u64(uint64_t(epoch));
      f.u64(hash);
    }
    return progress_payload("h", 1.0, 1, 0, me().id(), n, f.b);
  };
  EXPECT_EQ(bad(with_syncs(4, {})), "4 earlier sync points (at most 3)");
  EXPECT_EQ(bad(with_syncs(1, {{0, 5}})), "earlier sync point 0 (epoch 0) is not below the one before it (0), or has no hash");
  EXPECT_NE(bad(with_syncs(2, {{-1, 5}})).find("earlier sync point 0 (epoch -1)"), std::string::npos);
  Bytes no_points = with_syncs(2, {});
  no_points.resize(no_points.size() - kObserverBytes);  // the count promises two points, the payload ends
  EXPECT_NE(bad(no_points).find("payload ends inside a 64-bit field"), std::string::npos);
  Bytes short_host = progress_payload("hostname", 1.0);
  short_host.resize(short_host.size() - 37 - kObserverBytes);  // the string's length runs past the payload
  EXPECT_NE(bad(short_host).find("payload ends inside data"), std::string::npos);
}

Bytes group_payload(const std::vector<uint64_t> &members, uint32_t count) {
  Frame f;
  f.u64(0);  // fingerprint
  f.u64(members.empty() ? 0 : members[0]);
  f.u64(1);
  f.u32(0);
  f.u32(count);
  for (uint64_t m : members) f.u64(m);
  return f.b;
}

TEST(Records, RejectsOutOfRangeGroupFields) {
  std::string why;
  auto bad = [&](const Bytes &payload) {
    const Bytes b = frame(3, payload);
    EXPECT_FALSE(decode_group(kRun, b.data(), b.size(), &why));
    return why;
  };
  EXPECT_EQ(bad(group_payload({}, 0)), "group has no members");
  std::vector<uint64_t> many(4097);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i;
  EXPECT_EQ(bad(group_payload(many, 4097)), "group of 4097 members, more than 4096");
  EXPECT_EQ(bad(group_payload({1, 3, 2}, 3)), "members not sorted and unique at position 2");
  EXPECT_EQ(bad(group_payload({1, 1}, 2)), "members not sorted and unique at position 1");
  // A count that claims more members than the payload holds is refused
  // before anything is allocated for it.
  EXPECT_EQ(bad(group_payload({1, 2}, 4000)), "group of 4000 members needs 32000 bytes, payload has 16");
}

Bytes fingerprint_payload(uint8_t truncated, const std::string &text, uint32_t peers) {
  Frame f;
  f.u64(0x42);
  f.u8(truncated);
  f.u32(static_cast<uint32_t>(text.size()));
  f.b.insert(f.b.end(), text.begin(), text.end());
  f.u32(peers);
  return f.b;
}

TEST(Records, RejectsOutOfRangeFingerprintFields) {
  std::string why;
  auto bad = [&](const Bytes &payload) {
    const Bytes b = frame(5, payload);
    EXPECT_FALSE(decode_fingerprint(kRun, b.data(), b.size(), &why));
    return why;
  };
  EXPECT_EQ(bad(fingerprint_payload(0, "w", 0)), "peers 0 outside 1..1048576");
  EXPECT_EQ(bad(fingerprint_payload(0, "w", kMaxPeers + 1)), "peers 1048577 outside 1..1048576");
  EXPECT_EQ(bad(fingerprint_payload(2, "w", 1)), "truncated flag 2 is neither 0 nor 1");
  const Bytes good = frame(5, fingerprint_payload(1, "w", 3));
  auto f = decode_fingerprint(kRun, good.data(), good.size(), &why);
  ASSERT_TRUE(f) << why;
  EXPECT_EQ(f->peers, 3u);
  EXPECT_TRUE(f->truncated);
}

TEST(Records, EncodeRefusesWhatDecodeWouldReject) {
  ProgressRecord p = sample_progress();
  p.state_host.assign(256, 'x');
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.samples_per_second = std::nan("");
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p.samples_per_second = -0.5;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.epoch = -1;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.sync_epoch = -1;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.earlier_syncs.push_back({0, 9});  // four earlier sync points: one too many
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.earlier_syncs[1].epoch = 35;  // not decreasing
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.earlier_syncs[0].hash = 0;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.target_batch_size = 0;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.loss_epoch = p.epoch + 1;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.last_round.members = 0;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);
  p = sample_progress();
  p.last_round.round_ms = -1;
  EXPECT_THROW(encode(kRun, p, me()), std::invalid_argument);

  GroupRecord g = sample_group();
  g.members = {3, 2};
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);
  g.members = {};
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);
  g.members.resize(4097);
  for (size_t i = 0; i < g.members.size(); ++i) g.members[i] = i;
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);

  OobRecord o = sample_oob();
  o.rank = o.size;
  EXPECT_THROW(encode(kRun, o, me()), std::invalid_argument);
  o = sample_oob();
  o.payload.resize(kMaxOobPayload + 1);
  EXPECT_THROW(encode(kRun, o, me()), std::invalid_argument);
  o = sample_oob();
  o.state_host.assign(256, 'h');
  EXPECT_THROW(encode(kRun, o, me()), std::invalid_argument);
}


}  // namespace
}  // namespace loom_collab

namespace loom_collab {
namespace {

using namespace records_test;

TEST(Records, FingerprintRoundTripAndLimits) {
  FingerprintRecord f{0x42, std::string(kMaxFingerprintText, 'x'), true, 7};
  const Bytes b = encode(kRun, f, me());
  std::string why;
  auto back = decode_fingerprint(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->fingerprint, 0x42u);
  EXPECT_EQ(back->text, f.text);
  EXPECT_TRUE(back->truncated);
  EXPECT_EQ(back->peers, 7u);
  f.text += 'x';
  EXPECT_THROW(encode(kRun, f, me()), std::invalid_argument);
  f.text.pop_back();
  for (uint32_t bad : {0u, kMaxPeers + 1}) {
    f.peers = bad;
    EXPECT_THROW(encode(kRun, f, me()), std::invalid_argument) << bad;
  }
  // A group's hash covers what its members train.
  GroupRecord g = sample_group(), other = sample_group();
  other.fingerprint ^= 1;
  EXPECT_NE(g.group_hash(), other.group_hash());
  EXPECT_NE(round_space("run", 1), round_space("run", 2));
}

}  // namespace
}  // namespace loom_collab
