// SPDX-License-Identifier: Apache-2.0
// What the records tests share: a key pair that signs, records built by
// hand from the documented layout, and each kind's decoder type-erased.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "records.h"

namespace loom_collab {
namespace records_test {

inline const uint64_t kRun = run_hash("test-run");

// The key pair that signs the tests' records (a fresh one per process).
inline const Identity &me() {
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
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    u32(bits);
  }
};

inline Bytes frame(uint8_t kind, const Bytes &payload, uint64_t run = kRun, uint8_t version = 11,
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
inline Bytes payload_of(const Bytes &record) { return Bytes(record.begin() + 18, record.end() - 100); }

// Rewrites a record's CRC after a test changed its bytes on purpose, so
// that what decode sees is a damaged signature, not a damaged frame.
inline void fix_crc(Bytes &b) {
  const uint32_t crc = static_cast<uint32_t>(crc32_z(0, b.data(), b.size() - 4));
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

inline ProgressRecord sample_progress() {
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
  p.earlier_syncs = {{35, 0x35}, {30, 0x30}, {25, 0x25}};
  p.target_batch_size = 4096;
  p.last_loss = 0.25f;
  p.loss_epoch = 41;
  p.epoch_loss = 0.5f;
  p.loss_windows = 17;
  p.last_round = {41, 0x600d600d600dULL, 4, 4100, 12.5f, 33.25f};
  return p;
}

inline GroupRecord sample_group() {
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

// A group record's payload built by hand from the documented layout
// (reuse 0), with the hub's host and port as given, checked or not.
inline Bytes group_payload_of(const GroupRecord &g, const std::string &hub_host, uint16_t hub_port) {
  Frame f;
  f.u64(g.fingerprint);
  f.u64(g.leader);
  f.u64(uint64_t(g.epoch));
  f.u32(g.attempt);
  f.u32(uint32_t(g.members.size()));
  for (uint64_t m : g.members) f.u64(m);
  f.u64(0);  // reuse: none
  f.u16(uint16_t(hub_host.size()));
  for (char c : hub_host) f.u8(uint8_t(c));
  f.u16(hub_port);
  return f.b;
}

inline OobRecord sample_oob() {
  OobRecord o;
  o.group_hash = sample_group().group_hash();
  o.rank = 2;
  o.size = 4;
  o.payload = {1, 2, 3, 0, 255};
  o.state_host = "10.0.0.7";
  o.state_port = 7001;
  return o;
}

// Each kind's decoder, type-erased, for the tests that apply to all four.
using Decoder = std::function<bool(const Bytes &, std::string *)>;
struct Kind {
  const char *name;
  Bytes valid;
  Decoder decode;
};

inline std::vector<Kind> all_kinds() {
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

inline std::string rejection(const Kind &k, const Bytes &b) {
  std::string why;
  EXPECT_FALSE(k.decode(b, &why)) << k.name;
  EXPECT_FALSE(why.empty()) << k.name;
  return why;
}

constexpr size_t kObserverBytes = 64;  // their size on the wire

// The fields format version 5 added to a progress record (what observers
// show), valid by default for a record of epoch 1.
struct ObserverFields {
  uint64_t target = 64;
  float last_loss = 1.5f;
  int64_t loss_epoch = 0;
  float epoch_loss = 2.0f;
  uint32_t loss_windows = 3;
  int64_t round_epoch = 0;
  uint64_t round_group = 7;
  uint32_t round_members = 2;
  uint64_t round_samples = 64;
  float matchmaking_ms = 1.0f;
  float round_ms = 2.0f;
};

// sync_count and sync_points: the earlier sync points' count byte and what
// follows it; extra: bytes after the whole payload.
inline Bytes progress_payload(const std::string &host, double rate, int64_t epoch = 1, size_t extra = 0,
                              uint64_t peer = me().id(), uint8_t sync_count = 0, const Bytes &sync_points = {},
                              const ObserverFields &o = {}) {
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
  f.u8(sync_count);
  f.b.insert(f.b.end(), sync_points.begin(), sync_points.end());
  f.u64(o.target);
  f.f32(o.last_loss);
  f.u64(static_cast<uint64_t>(o.loss_epoch));
  f.f32(o.epoch_loss);
  f.u32(o.loss_windows);
  f.u64(static_cast<uint64_t>(o.round_epoch));
  f.u64(o.round_group);
  f.u32(o.round_members);
  f.u64(o.round_samples);
  f.f32(o.matchmaking_ms);
  f.f32(o.round_ms);
  f.b.resize(f.b.size() + extra);
  return f.b;
}

}  // namespace records_test
}  // namespace loom_collab
