// The swarm's wire records: round trips, and every malformed input refused
// with its reason (never half-read, never a crash).
#include "records.h"

#include <gtest/gtest.h>
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

const uint64_t kRun = run_hash("test-run");

// The key pair that signs this file's records (a fresh one per process).
const Identity &me() {
  static const Identity identity;
  return identity;
}

// Builds a frame by hand from the documented layout (magic "LMSW", version,
// kind, run, length, payload, signer's public key, signature of all before
// it, CRC-32 of all before it), so tests can make well-framed records with
// out-of-range payloads that encode() refuses.
struct Frame {
  Bytes b;
  void u8(uint8_t v) { b.push_back(v); }
  void u16(uint16_t v) { u8(v & 0xff), u8(v >> 8); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void f64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    u64(bits);
  }
};

Bytes frame(uint8_t kind, const Bytes &payload, uint64_t run = kRun, uint8_t version = 3,
            const Identity &signer = me()) {
  Frame f;
  for (char c : std::string("LMSW")) f.u8(static_cast<uint8_t>(c));
  f.u8(version);
  f.u8(kind);
  f.u64(run);
  f.u32(static_cast<uint32_t>(payload.size()));
  f.b.insert(f.b.end(), payload.begin(), payload.end());
  f.b.insert(f.b.end(), signer.public_key().begin(), signer.public_key().end());
  const Signature sig = signer.sign(f.b.data(), f.b.size());
  f.b.insert(f.b.end(), sig.begin(), sig.end());
  f.u32(static_cast<uint32_t>(crc32_z(0, f.b.data(), f.b.size())));
  return f.b;
}

// A record's payload: what lies between its header and its trailer.
Bytes payload_of(const Bytes &record) { return Bytes(record.begin() + 18, record.end() - 100); }

// Rewrites a record's CRC after a test changed its bytes on purpose, so
// that what decode sees is a damaged signature, not a damaged frame.
void fix_crc(Bytes &b) {
  const uint32_t crc = static_cast<uint32_t>(crc32_z(0, b.data(), b.size() - 4));
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

ProgressRecord sample_progress() {
  ProgressRecord p;
  p.peer_id = me().id();
  p.epoch = 42;
  p.samples = 1000;
  p.samples_per_second = 123.5;
  p.time_ms = 1700000000123;
  p.flags = ProgressRecord::kLoading | ProgressRecord::kServing;
  p.state_host = "203.0.113.5";
  p.state_port = 31337;
  p.fingerprint = 0xfeedfacecafebeefULL;
  p.since_ms = 1699999999000;
  p.sync_epoch = 40;
  p.sync_hash = 0x5eed5eed5eed5eedULL;
  return p;
}

GroupRecord sample_group() {
  GroupRecord g;
  g.fingerprint = 0xabcdef;
  g.leader = me().id();
  g.epoch = 3;
  g.attempt = 2;
  g.members = {1, 7, 99, me().id(), 0xffffffffffffffffULL};
  std::sort(g.members.begin(), g.members.end());
  g.members.erase(std::unique(g.members.begin(), g.members.end()), g.members.end());
  return g;
}

OobRecord sample_oob() {
  OobRecord o;
  o.group_hash = sample_group().group_hash();
  o.rank = 2;
  o.size = 4;
  o.payload = {1, 2, 3, 0, 255};
  return o;
}

// Each kind's decoder, type-erased, for the tests that apply to all four.
using Decoder = std::function<bool(const Bytes &, std::string *)>;
struct Kind {
  const char *name;
  Bytes valid;
  Decoder decode;
};

std::vector<Kind> all_kinds() {
  JoinRecord j{me().id(), 9, 1, 1700000000000};
  return {
      {"progress", encode(kRun, sample_progress(), me()),
       [](const Bytes &b, std::string *w) { return decode_progress(kRun, b.data(), b.size(), w).has_value(); }},
      {"join", encode(kRun, j, me()),
       [](const Bytes &b, std::string *w) { return decode_join(kRun, b.data(), b.size(), w).has_value(); }},
      {"group", encode(kRun, sample_group(), me()),
       [](const Bytes &b, std::string *w) { return decode_group(kRun, b.data(), b.size(), w).has_value(); }},
      {"oob", encode(kRun, sample_oob(), me()),
       [](const Bytes &b, std::string *w) { return decode_oob(kRun, b.data(), b.size(), w).has_value(); }},
      {"fingerprint", encode(kRun, FingerprintRecord{0x1234, "parameter 'w': Float [2]\n", false}, me()),
       [](const Bytes &b, std::string *w) { return decode_fingerprint(kRun, b.data(), b.size(), w).has_value(); }},
  };
}

std::string rejection(const Kind &k, const Bytes &b) {
  std::string why;
  EXPECT_FALSE(k.decode(b, &why)) << k.name;
  EXPECT_FALSE(why.empty()) << k.name;
  return why;
}

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
}

TEST(Records, ProgressIsLittleEndianOnTheWire) {
  ProgressRecord p;
  p.peer_id = me().id();
  p.epoch = 0x0807060504030201LL;
  const Bytes b = encode(kRun, p, me());
  ASSERT_GE(b.size(), 34u);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "LMSW");
  EXPECT_EQ(b[4], 3);  // format version
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[18 + i], uint8_t(me().id() >> (8 * i)));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[26 + i], i + 1);
  // The trailer: the signer's public key, then its signature.
  EXPECT_TRUE(std::equal(me().public_key().begin(), me().public_key().end(), b.end() - 100));
}

TEST(Records, JoinRoundTrip) {
  JoinRecord j{me().id(), 123456789012LL, 4000000000u, 1700000000999LL};
  const Bytes b = encode(kRun, j, me());
  std::string why;
  auto back = decode_join(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->peer_id, j.peer_id);
  EXPECT_EQ(back->epoch, j.epoch);
  EXPECT_EQ(back->attempt, j.attempt);
  EXPECT_EQ(back->time_ms, j.time_ms);
}

TEST(Records, GroupRoundTripUpToTheMemberLimit) {
  for (size_t n : {size_t{1}, size_t{4}, size_t{4096}}) {
    GroupRecord g = sample_group();
    g.members.clear();
    for (size_t i = 0; i < n; ++i) g.members.push_back(i * 3 + 1);
    const Bytes b = encode(kRun, g, me());
    std::string why;
    auto back = decode_group(kRun, b.data(), b.size(), &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->leader, g.leader);
    EXPECT_EQ(back->epoch, g.epoch);
    EXPECT_EQ(back->attempt, g.attempt);
    EXPECT_EQ(back->members, g.members);
    EXPECT_EQ(back->group_hash(), g.group_hash());
  }
}

TEST(Records, OobRoundTripUpToThePayloadLimit) {
  for (size_t n : {size_t{0}, size_t{5}, kMaxOobPayload}) {
    OobRecord o = sample_oob();
    o.payload.assign(n, 0);
    for (size_t i = 0; i < n; ++i) o.payload[i] = static_cast<uint8_t>(i * 7);
    const Bytes b = encode(kRun, o, me());
    std::string why;
    auto back = decode_oob(kRun, b.data(), b.size(), &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->group_hash, o.group_hash);
    EXPECT_EQ(back->rank, o.rank);
    EXPECT_EQ(back->size, o.size);
    EXPECT_EQ(back->payload, o.payload);
  }
}

TEST(Records, GroupHashDependsOnEpochAttemptAndMembersOnly) {
  const GroupRecord g = sample_group();
  GroupRecord other_leader = g;
  other_leader.leader = 99;
  EXPECT_EQ(g.group_hash(), other_leader.group_hash());
  GroupRecord e = g, a = g, m = g, fewer = g;
  e.epoch += 1;
  a.attempt += 1;
  m.members[1] += 1;
  fewer.members.pop_back();
  for (const GroupRecord *x : {&e, &a, &m, &fewer}) EXPECT_NE(x->group_hash(), g.group_hash());
  // Members 1..n as one list vs. shifted: neighbouring lists hash far apart.
  EXPECT_NE(g.group_hash() >> 32, m.group_hash() >> 32);
}

TEST(Records, KeysAreNamespacedByRun) {
  EXPECT_EQ(progress_key("r1"), "loom/r1/progress");
  EXPECT_EQ(join_key("r1", 12, 3), "loom/r1/join/19");  // (12 + 13 x 3) mod 32
  EXPECT_EQ(group_key("r1", 12, 3), "loom/r1/group/19");
  EXPECT_EQ(oob_key("r1", 12, 3), "loom/r1/oob/19");
  EXPECT_NE(progress_key("r1"), progress_key("r2"));
  EXPECT_NE(join_key("r1", 12, 0), join_key("r2", 12, 0));
}

TEST(Records, RoundsReuseABoundedSetOfKeys) {
  std::set<std::string> keys;
  for (int64_t epoch = 0; epoch < 100000; ++epoch)
    for (uint32_t attempt = 0; attempt < 3; ++attempt) keys.insert(join_key("r", epoch, attempt));
  EXPECT_EQ(keys.size(), size_t(kRoundBuckets));
  // Consecutive rounds, and a round and its retry, never share a key: a
  // round's values are replaced only kRoundBuckets rounds later.
  for (int64_t epoch = 0; epoch < 1000; ++epoch) {
    EXPECT_NE(round_bucket(epoch, 0), round_bucket(epoch + 1, 0)) << epoch;
    EXPECT_NE(round_bucket(epoch, 0), round_bucket(epoch, 1)) << epoch;
    EXPECT_EQ(round_bucket(epoch, 0), round_bucket(epoch + kRoundBuckets, 0)) << epoch;
  }
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
  EXPECT_NE(rejection(k, frame(1, payload, kRun, 1)).find("unknown record format version 1 (this build reads 3)"),
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
  f.u8(3);
  f.u8(1);
  f.u64(kRun);
  f.u32(0xffffffffu);
  f.u32(0);
  const Kind k = all_kinds()[0];
  EXPECT_NE(rejection(k, f.b).find("payload length 4294967295 exceeds the limit"), std::string::npos);
}

Bytes progress_payload(const std::string &host, double rate, int64_t epoch = 1, size_t extra = 0,
                       uint64_t peer = me().id()) {
  Frame f;
  f.u64(peer);
  f.u64(static_cast<uint64_t>(epoch));
  f.u64(10);
  f.f64(rate);
  f.u64(0);
  f.u32(0);
  f.u16(static_cast<uint16_t>(host.size()));
  f.b.insert(f.b.end(), host.begin(), host.end());
  f.u16(80);
  f.u64(0);  // fingerprint
  f.u64(0);  // since_ms
  f.u64(0);  // sync_epoch
  f.u64(0);  // sync_hash
  f.b.resize(f.b.size() + extra);
  return f.b;
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
  Bytes short_host = progress_payload("hostname", 1.0);
  short_host.resize(short_host.size() - 37);  // the string's length runs past the payload
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

Bytes oob_payload(uint32_t rank, uint32_t size, uint32_t claimed, size_t actual) {
  Frame f;
  f.u64(1);
  f.u32(rank);
  f.u32(size);
  f.u32(claimed);
  f.b.resize(f.b.size() + actual);
  return f.b;
}

TEST(Records, RejectsOutOfRangeOobFields) {
  std::string why;
  auto bad = [&](const Bytes &payload) {
    const Bytes b = frame(4, payload);
    EXPECT_FALSE(decode_oob(kRun, b.data(), b.size(), &why));
    return why;
  };
  EXPECT_EQ(bad(oob_payload(4, 4, 0, 0)), "rank 4 not below size 4");
  EXPECT_EQ(bad(oob_payload(0, 0, 0, 0)), "rank 0 not below size 0");
  EXPECT_EQ(bad(oob_payload(0, 5000, 0, 0)), "size 5000 above 4096");
  EXPECT_EQ(bad(oob_payload(0, 2, kMaxOobPayload + 1, kMaxOobPayload + 1)),
            "oob payload of 49153 bytes, above 49152");
  EXPECT_NE(bad(oob_payload(0, 2, 10, 4)).find("payload ends inside data"), std::string::npos);
  EXPECT_EQ(bad(oob_payload(0, 2, 4, 10)), "6 unread bytes at the end of the payload");
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
}


// ---- Signatures: who may speak for whom -------------------------------------

TEST(Records, PeerIdsDeriveFromPublicKeys) {
  const Identity a, b;
  EXPECT_NE(a.id(), b.id());
  EXPECT_NE(a.id(), 0u);
  EXPECT_EQ(peer_id_of(a.public_key()), a.id());
  PublicKey other = a.public_key();
  other[0] ^= 1;
  EXPECT_NE(peer_id_of(other), a.id());
}

TEST(Records, EveryKindDecodesItsSigner) {
  const Identity other;
  OobRecord o = sample_oob();
  const Bytes b = encode(kRun, o, other);
  std::string why;
  auto back = decode_oob(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->signer, other.id());  // the group reads a rank's part only from that member
}

TEST(Records, ARecordThatSpeaksForAnotherPeerIsRejectedAsForged) {
  const Identity victim;
  const std::string forged = " is not its signer: signed by peer " + std::to_string(me().id()) + " (forged)";
  std::string why;
  // Progress: the victim's id in the payload, signed by this test's key.
  const Bytes p = frame(1, progress_payload("host", 1.0, 1, 0, victim.id()));
  EXPECT_FALSE(decode_progress(kRun, p.data(), p.size(), &why));
  EXPECT_EQ(why, "peer " + std::to_string(victim.id()) + forged);
  // Join: the same.
  Frame j;
  j.u64(victim.id());
  j.u64(1);
  j.u32(0);
  j.u64(0);
  const Bytes jb = frame(2, j.b);
  EXPECT_FALSE(decode_join(kRun, jb.data(), jb.size(), &why));
  EXPECT_EQ(why, "peer " + std::to_string(victim.id()) + forged);
  // Group: a leader that did not sign it.
  GroupRecord g = sample_group();
  g.leader = victim.id();
  Frame gf;
  gf.u64(g.fingerprint);
  gf.u64(g.leader);
  gf.u64(uint64_t(g.epoch));
  gf.u32(g.attempt);
  gf.u32(uint32_t(g.members.size()));
  for (uint64_t m : g.members) gf.u64(m);
  const Bytes gb = frame(3, gf.b);
  EXPECT_FALSE(decode_group(kRun, gb.data(), gb.size(), &why));
  EXPECT_EQ(why, "leader " + std::to_string(victim.id()) + forged);
  // And encode never makes one.
  ProgressRecord q = sample_progress();
  q.peer_id = victim.id();
  EXPECT_THROW(encode(kRun, q, me()), std::invalid_argument);
  JoinRecord jr{victim.id(), 1, 0, 0};
  EXPECT_THROW(encode(kRun, jr, me()), std::invalid_argument);
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);
}

TEST(Records, ASignatureThatDoesNotMatchIsRejected) {
  const Identity victim;
  for (const Kind &k : all_kinds()) {
    // Someone else's public key put in place of the signer's (the CRC made
    // good again): the signature no longer verifies.
    Bytes swapped = k.valid;
    std::copy(victim.public_key().begin(), victim.public_key().end(), swapped.end() - 100);
    fix_crc(swapped);
    EXPECT_EQ(rejection(k, swapped),
              "bad signature: not signed by the key it carries (that of peer " + std::to_string(victim.id()) + ")")
        << k.name;
    // A payload changed after signing, CRC made good.
    Bytes altered = k.valid;
    altered[18] ^= 1;
    fix_crc(altered);
    EXPECT_NE(rejection(k, altered).find("bad signature"), std::string::npos) << k.name;
    // A damaged signature.
    Bytes damaged = k.valid;
    damaged[damaged.size() - 10] ^= 0x40;
    fix_crc(damaged);
    EXPECT_NE(rejection(k, damaged).find("bad signature"), std::string::npos) << k.name;
  }
}
}  // namespace
}  // namespace loom_collab

namespace loom_collab {
namespace {

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
