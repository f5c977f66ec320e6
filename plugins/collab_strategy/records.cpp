// SPDX-License-Identifier: Apache-2.0
// Wire format of the swarm's records (version 6; since 3 every record is
// signed by the peer that made it, identity.h; 4 added a progress record's
// earlier sync points, 5 what observers show: its target, loss and last
// round, 6 trims an oob record's trailing zero bytes):
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

#include <zlib.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace loom_collab {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'M', 'S', 'W'};
constexpr uint8_t kVersion = 7;
constexpr size_t kHeaderSize = 4 + 1 + 1 + 8 + 4;  // up to and including the payload length
constexpr size_t kTrailer = kPublicKeyBytes + kSignatureBytes + 4;  // signer, signature, CRC
constexpr size_t kFrameSize = kHeaderSize + kTrailer;
constexpr size_t kMaxPayload = 64 * 1024;          // OpenDHT's own value limit
constexpr size_t kMaxString = 255;
constexpr size_t kMaxMembers = 4096;

enum Kind : uint8_t { kProgress = 1, kJoin = 2, kGroup = 3, kOob = 4, kFingerprint = 5 };

const char *kind_name(uint8_t k) {
  switch (k) {
    case kProgress: return "progress";
    case kJoin: return "join";
    case kGroup: return "group";
    case kOob: return "oob";
    case kFingerprint: return "fingerprint";
    default: return nullptr;
  }
}

// "a progress record", "an oob record".
std::string a_kind(const char *name) { return std::string(name[0] == 'o' ? "an " : "a ") + name + " record"; }

uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

uint32_t crc32_of(const uint8_t *p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0L, Z_NULL, 0), p, n));
}

// Appends little-endian fields; the frame is closed by finish().
class Writer {
 public:
  Writer(uint64_t run, uint8_t kind) {
    out_.insert(out_.end(), kMagic, kMagic + 4);
    u8(kVersion);
    u8(kind);
    u64(run);
    u32(0);  // payload length, patched by finish()
  }
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);  // the IEEE-754 bit pattern, not a struct layout
    u64(bits);
  }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u32(bits);
  }
  void str(const std::string &s) {
    out_.push_back(static_cast<uint8_t>(s.size()));
    out_.push_back(static_cast<uint8_t>(s.size() >> 8));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void bytes(const Bytes &b) {
    u32(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  Bytes finish(const Identity &signer) {
    const size_t payload = out_.size() - kHeaderSize;
    for (int i = 0; i < 4; ++i) out_[kHeaderSize - 4 + i] = static_cast<uint8_t>(payload >> (8 * i));
    out_.insert(out_.end(), signer.public_key().begin(), signer.public_key().end());
    const Signature sig = signer.sign(out_.data(), out_.size());
    out_.insert(out_.end(), sig.begin(), sig.end());
    u32(crc32_of(out_.data(), out_.size()));
    return std::move(out_);
  }

 private:
  Bytes out_;
};

// Bounds-checked little-endian reads over a payload; the first short read
// records what was missing and every later read fails too.
class Reader {
 public:
  Reader(const uint8_t *p, size_t n) : p_(p), n_(n) {}
  bool u8(uint8_t *v) {
    if (!need(1, "a byte")) return false;
    *v = p_[pos_++];
    return true;
  }
  bool u16(uint16_t *v) {
    if (!need(2, "a 16-bit field")) return false;
    *v = static_cast<uint16_t>(p_[pos_] | (p_[pos_ + 1] << 8));
    pos_ += 2;
    return true;
  }
  bool u32(uint32_t *v) {
    if (!need(4, "a 32-bit field")) return false;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>(p_[pos_ + i]) << (8 * i);
    pos_ += 4;
    *v = r;
    return true;
  }
  bool u64(uint64_t *v) {
    if (!need(8, "a 64-bit field")) return false;
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += 8;
    *v = r;
    return true;
  }
  bool i64(int64_t *v) {
    uint64_t u;
    if (!u64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool f64(double *v) {
    uint64_t bits;
    if (!u64(&bits)) return false;
    std::memcpy(v, &bits, sizeof bits);
    return true;
  }
  bool f32(float *v) {
    uint32_t bits;
    if (!u32(&bits)) return false;
    std::memcpy(v, &bits, sizeof bits);
    return true;
  }
  bool raw(size_t len, const uint8_t **at) {
    if (!need(len, "data")) return false;
    *at = p_ + pos_;
    pos_ += len;
    return true;
  }
  size_t left() const { return n_ - pos_; }
  const std::string &error() const { return error_; }
  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }

 private:
  bool need(size_t k, const char *what) {
    if (!error_.empty()) return false;
    if (n_ - pos_ < k) {
      return fail("payload ends inside " + std::string(what) + " at byte " + std::to_string(pos_) + " of " +
                  std::to_string(n_));
    }
    return true;
  }
  const uint8_t *p_;
  size_t n_;
  size_t pos_ = 0;
  std::string error_;
};

uint32_t load32(const uint8_t *p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
uint64_t load64(const uint8_t *p) {
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(p[i]) << (8 * i);
  return r;
}

bool set_why(std::string *why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

// Checks the frame and its signature and, on success, points *payload at
// the payload and sets *signer to the signing peer's id.
bool open_frame(uint64_t run, uint8_t kind, const uint8_t *data, size_t len, Reader *payload, uint64_t *signer,
                std::string *why) {
  const std::string expected = a_kind(kind_name(kind));
  if (data == nullptr || len == 0) {
    return set_why(why, "truncated: 0 of at least " + std::to_string(kFrameSize) + " bytes");
  }
  if (std::memcmp(data, kMagic, len < 4 ? len : 4) != 0) return set_why(why, "not a Loom swarm record (bad magic)");
  if (len < kHeaderSize) {
    return set_why(why, "truncated: " + std::to_string(len) + " of at least " + std::to_string(kFrameSize) + " bytes");
  }
  if (data[4] != kVersion) {
    return set_why(why, "unknown record format version " + std::to_string(data[4]) + " (this build reads " +
                            std::to_string(kVersion) + ")");
  }
  const uint32_t plen = load32(data + 14);
  if (plen > kMaxPayload) {
    return set_why(why, "payload length " + std::to_string(plen) + " exceeds the limit of " +
                            std::to_string(kMaxPayload) + " bytes");
  }
  const size_t total = kFrameSize + plen;
  if (len < total) {
    return set_why(why, "truncated: " + std::to_string(len) + " of " + std::to_string(total) + " bytes");
  }
  if (len > total) {
    return set_why(why, std::to_string(len - total) + " trailing bytes after a record of " + std::to_string(total) +
                            " bytes");
  }
  const uint32_t stored = load32(data + total - 4);
  const uint32_t computed = crc32_of(data, total - 4);
  if (stored != computed) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "bad checksum (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", stored,
                  computed);
    return set_why(why, buf);
  }
  if (data[5] != kind) {
    const char *name = kind_name(data[5]);
    return set_why(why, "not " + expected + ": " + (name ? a_kind(name) : "unknown kind " + std::to_string(data[5])));
  }
  const uint64_t their_run = load64(data + 6);
  if (their_run != run) return set_why(why, "record of run " + hex64(their_run) + ", this run is " + hex64(run));
  PublicKey pk;
  Signature sig;
  std::memcpy(pk.data(), data + kHeaderSize + plen, pk.size());
  std::memcpy(sig.data(), data + kHeaderSize + plen + pk.size(), sig.size());
  *signer = peer_id_of(pk);
  if (!verify_signature(pk, sig, data, kHeaderSize + plen + pk.size())) {
    return set_why(why, "bad signature: not signed by the key it carries (that of peer " + std::to_string(*signer) +
                            ")");
  }
  *payload = Reader(data + kHeaderSize, plen);
  return true;
}

// A record speaks for `claimed`: only that peer may have signed it.
bool check_signer(Reader &r, const char *role, uint64_t claimed, uint64_t signer) {
  return claimed == signer || r.fail(std::string(role) + " " + std::to_string(claimed) +
                                     " is not its signer: signed by peer " + std::to_string(signer) + " (forged)");
}

void require_signer(uint64_t claimed, const Identity &signer, const char *role) {
  if (claimed != signer.id())
    throw std::invalid_argument("cannot encode swarm record: " + std::string(role) + " " + std::to_string(claimed) +
                                " is not the signer " + std::to_string(signer.id()));
}

// Ends a payload parse: every byte read, no read failed.
bool close_payload(const Reader &r, std::string *why) {
  if (!r.error().empty()) return set_why(why, r.error());
  if (r.left() != 0) return set_why(why, std::to_string(r.left()) + " unread bytes at the end of the payload");
  return true;
}

bool read_string(Reader &r, std::string *s, const char *field) {
  uint16_t n;
  if (!r.u16(&n)) return false;
  if (n > kMaxString) {
    return r.fail(std::string(field) + " is " + std::to_string(n) + " bytes, longer than " +
                  std::to_string(kMaxString));
  }
  const uint8_t *at;
  if (!r.raw(n, &at)) return false;
  s->assign(reinterpret_cast<const char *>(at), n);
  return true;
}

bool check_epoch(Reader &r, int64_t epoch) {
  return epoch >= 0 || r.fail("epoch " + std::to_string(epoch) + " is negative");
}

void require(bool ok, const std::string &what) {
  if (!ok) throw std::invalid_argument("cannot encode swarm record: " + what);
}

void write_members(Writer &w, const std::vector<uint64_t> &members) {
  require(!members.empty(), "group has no members");
  require(members.size() <= kMaxMembers, std::to_string(members.size()) + " members, more than " +
                                             std::to_string(kMaxMembers));
  for (size_t i = 1; i < members.size(); ++i) require(members[i - 1] < members[i], "members not sorted and unique");
  w.u32(static_cast<uint32_t>(members.size()));
  for (uint64_t m : members) w.u64(m);
}

}  // namespace

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
  Writer w(run, kGroup);
  w.u64(r.fingerprint);
  w.u64(r.leader);
  w.i64(r.epoch);
  w.u32(r.attempt);
  write_members(w, r.members);
  w.u64(r.reuse);
  return w.finish(signer);
}

Bytes encode(uint64_t run, const OobRecord &r, const Identity &signer) {
  require(r.size <= kMaxMembers, "size " + std::to_string(r.size) + " above " + std::to_string(kMaxMembers));
  require(r.rank < r.size, "rank " + std::to_string(r.rank) + " not below size " + std::to_string(r.size));
  require(r.payload.size() <= kMaxOobPayload, "payload of " + std::to_string(r.payload.size()) + " bytes, above " +
                                                  std::to_string(kMaxOobPayload));
  Writer w(run, kOob);
  w.u64(r.group_hash);
  w.u32(r.rank);
  w.u32(r.size);
  size_t kept = r.payload.size();
  while (kept > 0 && r.payload[kept - 1] == 0) --kept;
  w.bytes(Bytes(r.payload.begin(), r.payload.begin() + ptrdiff_t(kept)));
  w.u32(uint32_t(r.payload.size() - kept));  // the zeros trimmed
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
      bool sorted = true;
      for (uint32_t i = 0; i < count && r.u64(&g.members[i]); ++i) {
        if (i > 0 && g.members[i - 1] >= g.members[i]) {
          r.fail("members not sorted and unique at position " + std::to_string(i));
          sorted = false;
          break;
        }
      }
      if (sorted && r.u64(&g.reuse)) check_signer(r, "leader", g.leader, signer);
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
