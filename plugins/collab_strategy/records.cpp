// SPDX-License-Identifier: Apache-2.0
// Wire format of the swarm's records (version 11; since 3 every record is
// signed by the peer that made it, identity.h; 4 added a progress record's
// earlier sync points, 5 what observers show: its target, loss and last
// round, 6 trims an oob record's trailing zero bytes, 7 adds a join's kept
// communicator and a group's reuse, kept_comm.h, 8 a group's hub,
// oob_hub.h; 9 and 10 changed the weight exchange and top-ups, 11 adds the
// grant ask, a kind encoded in top_up_grants.cpp, and an oob record's
// state server). The frame's code is in
// records_frame.h:
//
//   magic "LMSW" | version u8 | kind u8 | run u64 | payload length u32 | payload |
//   signer's Ed25519 public key (32) | signature (64) | crc32 u32
//
// The signature covers every byte before it (the frame, the payload and the
// public key); the CRC-32 (zlib's) every byte before the CRC, so a damaged
// record is told from a forged one. Decoding checks, in this order, what a
// byte of the frame could have broken: magic, header length, version (a
// later version may move anything after it), total length, checksum, kind,
// run, signature, then the payload's fields, which must fill it exactly, and
// last that the peer the record speaks for is its signer.
#include "records.h"

#include "identity.h"
#include "records_frame.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace loom_collab {

using namespace record_frame;

uint64_t run_hash(const std::string &run_id) {
  return fnv1a(kFnvOffset, reinterpret_cast<const uint8_t *>(run_id.data()), run_id.size());
}

uint64_t GroupRecord::group_hash() const {
  // FNV-1a over the little-endian fields, then a SplitMix64 finaliser so that
  // neighbouring member lists land far apart.
  uint8_t buf[8];
  uint64_t h = kFnvOffset;
  auto mix_in = [&](uint64_t v, int width) {
    for (int i = 0; i < width; ++i) buf[i] = static_cast<uint8_t>(v >> (8 * i));
    h = fnv1a(h, buf, static_cast<size_t>(width));
  };
  mix_in(fingerprint, 8);
  mix_in(static_cast<uint64_t>(epoch), 8);
  mix_in(attempt, 4);
  mix_in(members.size(), 4);
  for (uint64_t m : members) mix_in(m, 8);
  if (reuse != 0) mix_in(reuse, 8);  // a group that builds its communicator hashes as before
  return mix64(h);
}

Bytes encode(uint64_t run, const ProgressRecord &r, const Identity &signer) {
  require(r.epoch >= 0 && r.sync_epoch >= 0, "negative epoch");
  require(std::isfinite(r.samples_per_second) && r.samples_per_second >= 0, "samples_per_second is not a finite rate >= 0");
  require(r.state_host.size() <= kMaxString, "state_host longer than " + std::to_string(kMaxString) + " bytes");
  require_signer(r.peer_id, signer, "peer_id");
  Writer w(run, kProgress);
  w.u64(r.peer_id);
  w.i64(r.epoch);
  w.u64(r.samples);
  w.f64(r.samples_per_second);
  w.i64(r.time_ms);
  w.u32(r.flags);
  w.str(r.state_host);
  w.u8(static_cast<uint8_t>(r.state_port));
  w.u8(static_cast<uint8_t>(r.state_port >> 8));
  w.u64(r.fingerprint);
  w.i64(r.since_ms);
  w.i64(r.sync_epoch);
  w.u64(r.sync_hash);
  require(r.earlier_syncs.size() <= ProgressRecord::kMaxEarlierSyncs,
          std::to_string(r.earlier_syncs.size()) + " earlier sync points (at most " +
              std::to_string(ProgressRecord::kMaxEarlierSyncs) + ")");
  w.u8(static_cast<uint8_t>(r.earlier_syncs.size()));
  int64_t after = r.sync_epoch;
  for (const auto &s : r.earlier_syncs) {
    require(s.epoch >= 0 && s.epoch < after && s.hash != 0,
            "earlier sync points must have epochs decreasing below sync_epoch and non-zero hashes");
    after = s.epoch;
    w.i64(s.epoch);
    w.u64(s.hash);
  }
  require(r.target_batch_size >= 1, "target_batch_size is 0");
  require(r.loss_epoch >= -1 && r.loss_epoch <= r.epoch, "loss_epoch outside -1..epoch");
  const auto &round = r.last_round;
  require(round.epoch >= -1 && round.epoch <= r.epoch, "the last round's epoch is outside -1..epoch");
  require(round.members <= kMaxMembers && (round.epoch < 0 || round.members >= 1),
          "the last round has " + std::to_string(round.members) + " members (1.." + std::to_string(kMaxMembers) + ")");
  require(std::isfinite(round.matchmaking_ms) && round.matchmaking_ms >= 0 && std::isfinite(round.round_ms) &&
              round.round_ms >= 0,
          "the last round's times are not finite durations >= 0");
  w.u64(r.target_batch_size);
  w.f32(r.last_loss);
  w.i64(r.loss_epoch);
  w.f32(r.epoch_loss);
  w.u32(r.loss_windows);
  w.i64(round.epoch);
  w.u64(round.group);
  w.u32(round.members);
  w.u64(round.samples);
  w.f32(round.matchmaking_ms);
  w.f32(round.round_ms);
  return w.finish(signer);
}

Bytes encode(uint64_t run, const JoinRecord &r, const Identity &signer) {
  require(r.epoch >= 0, "negative epoch");
  require_signer(r.peer_id, signer, "peer_id");
  require((r.kept == 0) == (r.kept_size == 0), "kept and kept_size must be both set or both 0");
  Writer w(run, kJoin);
  w.u64(r.peer_id);
  w.i64(r.epoch);
  w.u32(r.attempt);
  w.i64(r.time_ms);
  w.u64(r.kept);
  w.u32(r.kept_size);
  return w.finish(signer);
}

Bytes encode(uint64_t run, const GroupRecord &r, const Identity &signer) {
  require(r.epoch >= 0, "negative epoch");
  require_signer(r.leader, signer, "leader");
  require(r.hub_host.size() <= kMaxString, "hub_host longer than " + std::to_string(kMaxString) + " bytes");
  require(r.hub_host.empty() == (r.hub_port == 0), "a hub needs both a host and a port, or neither");
  Writer w(run, kGroup);
  w.u64(r.fingerprint);
  w.u64(r.leader);
  w.i64(r.epoch);
  w.u32(r.attempt);
  write_members(w, r.members);
  w.u64(r.reuse);
  w.str(r.hub_host);
  w.u16(r.hub_port);
  return w.finish(signer);
}

Bytes encode(uint64_t run, const OobRecord &r, const Identity &signer) {
  require(r.size <= kMaxMembers, "size " + std::to_string(r.size) + " above " + std::to_string(kMaxMembers));
  require(r.rank < r.size, "rank " + std::to_string(r.rank) + " not below size " + std::to_string(r.size));
  require(r.payload.size() <= kMaxOobPayload, "payload of " + std::to_string(r.payload.size()) + " bytes, above " +
                                                  std::to_string(kMaxOobPayload));
  require(r.state_host.size() <= kMaxString, "state host of " + std::to_string(r.state_host.size()) +
                                                 " bytes, above " + std::to_string(kMaxString));
  Writer w(run, kOob);
  w.u64(r.group_hash);
  w.u32(r.rank);
  w.u32(r.size);
  size_t kept = r.payload.size();
  while (kept > 0 && r.payload[kept - 1] == 0) --kept;
  w.bytes(Bytes(r.payload.begin(), r.payload.begin() + ptrdiff_t(kept)));
  w.u32(uint32_t(r.payload.size() - kept));  // the zeros trimmed
  w.str(r.state_host);
  w.u16(r.state_port);
  return w.finish(signer);
}

Bytes encode(uint64_t run, const FingerprintRecord &r, const Identity &signer) {
  require(r.text.size() <= kMaxFingerprintText, "fingerprint text of " + std::to_string(r.text.size()) +
                                                    " bytes, above " + std::to_string(kMaxFingerprintText));
  require(r.peers >= 1 && r.peers <= kMaxPeers, "peers " + std::to_string(r.peers) + " outside 1.." +
                                                   std::to_string(kMaxPeers));
  Writer w(run, kFingerprint);
  w.u64(r.fingerprint);
  w.u8(r.truncated ? 1 : 0);
  w.bytes(Bytes(r.text.begin(), r.text.end()));
  w.u32(r.peers);
  return w.finish(signer);
}

std::optional<ProgressRecord> decode_progress(uint64_t run, const uint8_t *data, size_t len, std::string *why) {
  Reader r(nullptr, 0);
  uint64_t signer = 0;
  if (!open_frame(run, kProgress, data, len, &r, &signer, why)) return std::nullopt;
  ProgressRecord p;
  uint8_t port_lo = 0, port_hi = 0;
  if (r.u64(&p.peer_id) && r.i64(&p.epoch) && check_epoch(r, p.epoch) && r.u64(&p.samples) &&
      r.f64(&p.samples_per_second) && r.i64(&p.time_ms) && r.u32(&p.flags) &&
      read_string(r, &p.state_host, "state_host") && r.u8(&port_lo) && r.u8(&port_hi) && r.u64(&p.fingerprint) &&
      r.i64(&p.since_ms) && r.i64(&p.sync_epoch)) {
    if (p.sync_epoch < 0) r.fail("sync_epoch " + std::to_string(p.sync_epoch) + " is negative");
    uint8_t n = 0;
    if (r.u64(&p.sync_hash) && r.u8(&n)) {
      if (n > ProgressRecord::kMaxEarlierSyncs)
        r.fail(std::to_string(n) + " earlier sync points (at most " +
               std::to_string(ProgressRecord::kMaxEarlierSyncs) + ")");
      int64_t after = p.sync_epoch;
      for (uint8_t i = 0; i < n && r.error().empty(); ++i) {
        ProgressRecord::SyncPoint s;
        if (!r.i64(&s.epoch) || !r.u64(&s.hash)) break;
        if (s.epoch < 0 || s.epoch >= after || s.hash == 0)
          r.fail("earlier sync point " + std::to_string(i) + " (epoch " + std::to_string(s.epoch) +
                 ") is not below the one before it (" + std::to_string(after) + "), or has no hash");
        after = s.epoch;
        p.earlier_syncs.push_back(s);
      }
    }
    auto &round = p.last_round;
    if (r.error().empty() && r.u64(&p.target_batch_size) && r.f32(&p.last_loss) && r.i64(&p.loss_epoch) &&
        r.f32(&p.epoch_loss) && r.u32(&p.loss_windows) && r.i64(&round.epoch) && r.u64(&round.group) &&
        r.u32(&round.members) && r.u64(&round.samples) && r.f32(&round.matchmaking_ms) && r.f32(&round.round_ms)) {
      if (p.target_batch_size == 0) r.fail("target_batch_size is 0");
      if (p.loss_epoch < -1 || p.loss_epoch > p.epoch)
        r.fail("loss_epoch " + std::to_string(p.loss_epoch) + " is outside -1.." + std::to_string(p.epoch) +
               " (its epoch)");
      if (round.epoch < -1 || round.epoch > p.epoch)
        r.fail("the last round's epoch " + std::to_string(round.epoch) + " is outside -1.." + std::to_string(p.epoch) +
               " (its epoch)");
      if (round.members > kMaxMembers || (round.epoch >= 0 && round.members == 0))
        r.fail("the last round has " + std::to_string(round.members) + " members (1.." + std::to_string(kMaxMembers) +
               ")");
      if (!std::isfinite(round.matchmaking_ms) || round.matchmaking_ms < 0 || !std::isfinite(round.round_ms) ||
          round.round_ms < 0)
        r.fail("the last round's times are not finite durations >= 0");
    }
    if (!std::isfinite(p.samples_per_second) || p.samples_per_second < 0) {
      r.fail("samples_per_second " + std::to_string(p.samples_per_second) + " is not a finite rate >= 0");
    }
    p.state_port = static_cast<uint16_t>(port_lo | (port_hi << 8));
    check_signer(r, "peer", p.peer_id, signer);
  }
  if (!close_payload(r, why)) return std::nullopt;
  return p;
}

std::optional<JoinRecord> decode_join(uint64_t run, const uint8_t *data, size_t len, std::string *why) {
  Reader r(nullptr, 0);
  uint64_t signer = 0;
  if (!open_frame(run, kJoin, data, len, &r, &signer, why)) return std::nullopt;
  JoinRecord j;
  if (r.u64(&j.peer_id) && r.i64(&j.epoch) && check_epoch(r, j.epoch) && r.u32(&j.attempt) && r.i64(&j.time_ms) &&
      r.u64(&j.kept) && r.u32(&j.kept_size)) {
    if ((j.kept == 0) != (j.kept_size == 0)) r.fail("a kept communicator needs both its round's hash and its size");
    else if (j.kept_size > kMaxMembers)
      r.fail("kept communicator of " + std::to_string(j.kept_size) + " members, more than " + std::to_string(kMaxMembers));
    else check_signer(r, "peer", j.peer_id, signer);
  }
  if (!close_payload(r, why)) return std::nullopt;
  return j;
}

std::optional<GroupRecord> decode_group(uint64_t run, const uint8_t *data, size_t len, std::string *why) {
  Reader r(nullptr, 0);
  uint64_t signer = 0;
  if (!open_frame(run, kGroup, data, len, &r, &signer, why)) return std::nullopt;
  GroupRecord g;
  uint32_t count = 0;
  if (r.u64(&g.fingerprint) && r.u64(&g.leader) && r.i64(&g.epoch) && check_epoch(r, g.epoch) && r.u32(&g.attempt) && r.u32(&count)) {
    if (count == 0) {
      r.fail("group has no members");
    } else if (count > kMaxMembers) {
      r.fail("group of " + std::to_string(count) + " members, more than " + std::to_string(kMaxMembers));
    } else if (r.left() / 8 < count) {
      // Checked before reserving so a lying count cannot make us allocate.
      r.fail("group of " + std::to_string(count) + " members needs " + std::to_string(8ULL * count) +
             " bytes, payload has " + std::to_string(r.left()));
    } else {
      g.members.resize(count);
      for (uint32_t i = 0; i < count && r.u64(&g.members[i]); ++i) {
        if (i > 0 && g.members[i - 1] >= g.members[i]) {
          r.fail("members not sorted and unique at position " + std::to_string(i));
          break;
        }
      }
      if (r.u64(&g.reuse) && read_string(r, &g.hub_host, "hub_host") && r.u16(&g.hub_port)) {
        if (g.hub_host.empty() != (g.hub_port == 0))
          r.fail("hub " + (g.hub_host.empty() ? std::string("port ") + std::to_string(g.hub_port) + " without a host"
                                              : "host " + g.hub_host + " without a port"));
        else
          check_signer(r, "leader", g.leader, signer);  // no read succeeds after a failure
      }
    }
  }
  if (!close_payload(r, why)) return std::nullopt;
  return g;
}

std::optional<OobRecord> decode_oob(uint64_t run, const uint8_t *data, size_t len, std::string *why) {
  Reader r(nullptr, 0);
  OobRecord o;
  if (!open_frame(run, kOob, data, len, &r, &o.signer, why)) return std::nullopt;
  uint32_t n = 0;
  if (r.u64(&o.group_hash) && r.u32(&o.rank) && r.u32(&o.size) && r.u32(&n)) {
    const uint8_t *at;
    if (o.size > kMaxMembers) {
      r.fail("size " + std::to_string(o.size) + " above " + std::to_string(kMaxMembers));
    } else if (o.rank >= o.size) {
      r.fail("rank " + std::to_string(o.rank) + " not below size " + std::to_string(o.size));
    } else if (n > kMaxOobPayload) {
      r.fail("oob payload of " + std::to_string(n) + " bytes, above " + std::to_string(kMaxOobPayload));
    } else if (r.raw(n, &at)) {
      o.payload.assign(at, at + n);
      uint32_t zeros = 0;
      if (r.u32(&zeros) && zeros > kMaxOobPayload - n)
        r.fail("oob payload of " + std::to_string(n) + " bytes and " + std::to_string(zeros) +
               " trimmed zeros, above " + std::to_string(kMaxOobPayload));
      else
        o.payload.resize(n + zeros, 0);
      if (read_string(r, &o.state_host, "state host")) r.u16(&o.state_port);
    }
  }
  if (!close_payload(r, why)) return std::nullopt;
  return o;
}

std::optional<FingerprintRecord> decode_fingerprint(uint64_t run, const uint8_t *data, size_t len, std::string *why) {
  Reader r(nullptr, 0);
  uint64_t signer = 0;
  if (!open_frame(run, kFingerprint, data, len, &r, &signer, why)) return std::nullopt;
  FingerprintRecord f;
  uint8_t truncated = 0;
  uint32_t n = 0;
  if (r.u64(&f.fingerprint) && r.u8(&truncated) && r.u32(&n)) {
    const uint8_t *at;
    if (truncated > 1) {
      r.fail("truncated flag " + std::to_string(truncated) + " is neither 0 nor 1");
    } else if (n > kMaxFingerprintText) {
      r.fail("fingerprint text of " + std::to_string(n) + " bytes, above " + std::to_string(kMaxFingerprintText));
    } else if (r.raw(n, &at) && r.u32(&f.peers)) {
      f.text.assign(reinterpret_cast<const char *>(at), n);
      f.truncated = truncated == 1;
      if (f.peers < 1 || f.peers > kMaxPeers)
        r.fail("peers " + std::to_string(f.peers) + " outside 1.." + std::to_string(kMaxPeers));
    }
  }
  if (!close_payload(r, why)) return std::nullopt;
  return f;
}

}  // namespace loom_collab
