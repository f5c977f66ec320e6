// SPDX-License-Identifier: Apache-2.0
// The swarm records' frame (records_frame.h).
#include "records_frame.h"

#include <zlib.h>

#include <cinttypes>
#include <cstdio>
#include <stdexcept>

namespace loom_collab {
namespace record_frame {
namespace {

const char *kind_name(uint8_t k) {
  switch (k) {
    case kProgress: return "progress";
    case kJoin: return "join";
    case kGroup: return "group";
    case kOob: return "oob";
    case kFingerprint: return "fingerprint";
    case kGrantAsk: return "grant ask";
    default: return nullptr;
  }
}

// "a progress record", "an oob record".
std::string a_kind(const char *name) { return std::string(name[0] == 'o' ? "an " : "a ") + name + " record"; }

uint32_t crc32_of(const uint8_t *p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0L, Z_NULL, 0), p, n));
}

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

}  // namespace

Bytes Writer::finish(const Identity &signer) {
  const size_t payload = out_.size() - kHeaderSize;
  for (int i = 0; i < 4; ++i) out_[kHeaderSize - 4 + i] = static_cast<uint8_t>(payload >> (8 * i));
  out_.insert(out_.end(), signer.public_key().begin(), signer.public_key().end());
  const Signature sig = signer.sign(out_.data(), out_.size());
  out_.insert(out_.end(), sig.begin(), sig.end());
  u32(crc32_of(out_.data(), out_.size()));
  return std::move(out_);
}


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

bool check_signer(Reader &r, const char *role, uint64_t claimed, uint64_t signer) {
  return claimed == signer || r.fail(std::string(role) + " " + std::to_string(claimed) +
                                     " is not its signer: signed by peer " + std::to_string(signer) + " (forged)");
}

void require_signer(uint64_t claimed, const Identity &signer, const char *role) {
  if (claimed != signer.id())
    throw std::invalid_argument("cannot encode swarm record: " + std::string(role) + " " + std::to_string(claimed) +
                                " is not the signer " + std::to_string(signer.id()));
}

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

}  // namespace record_frame
}  // namespace loom_collab
