/* SPDX-License-Identifier: Apache-2.0 */
// The swarm records' frame (records.cpp's layout comment): the constants,
// the little-endian Writer and the bounds-checked Reader, and the checks
// every record kind shares (the frame and its signature, the signer, a
// payload read to its end). Internal to records.cpp, records_frame.cpp and
// top_up_grants.cpp (a grant ask is a record of its own kind).
#ifndef LOOM_COLLAB_RECORDS_FRAME_H
#define LOOM_COLLAB_RECORDS_FRAME_H

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "identity.h"
#include "records.h"

namespace loom_collab {
namespace record_frame {

constexpr uint8_t kMagic[4] = {'L', 'M', 'S', 'W'};
// 9: the members' weight exchange (Peer::exchange_weights) carries each
// member's clock and speed, for a top-up's time boxes; peers of version 8
// would exchange vectors of another length.
// 10: a short round tops up by grants from its hub by default (top_up);
// a peer of version 9 would train its share beside them, past the target.
// 11: a grant ask is a record of its own kind, signed by its member
// (top_up_grants.h); a hub of version 10 would refuse every ask. An oob
// record names its member's state server (a split part's grants hub).
constexpr uint8_t kVersion = 11;
constexpr size_t kHeaderSize = 4 + 1 + 1 + 8 + 4;  // up to and including the payload length
constexpr size_t kTrailer = kPublicKeyBytes + kSignatureBytes + 4;  // signer, signature, CRC
constexpr size_t kFrameSize = kHeaderSize + kTrailer;
constexpr size_t kMaxPayload = 64 * 1024;          // OpenDHT's own value limit
constexpr size_t kMaxString = 255;
constexpr size_t kMaxMembers = 4096;

enum Kind : uint8_t { kProgress = 1, kJoin = 2, kGroup = 3, kOob = 4, kFingerprint = 5, kGrantAsk = 6 };

inline uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

// Appends little-endian fields; the frame is closed by finish().
class Writer {
 public:
  Writer(uint64_t run, uint8_t kind) {
    out_.reserve(kFrameSize + 64);  // also keeps GCC 12 from a false -Wstringop-overflow on the insert
    out_.insert(out_.end(), kMagic, kMagic + 4);
    u8(kVersion);
    u8(kind);
    u64(run);
    u32(0);  // payload length, patched by finish()
  }
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { le(v); }
  void u32(uint32_t v) { le(v); }
  void u64(uint64_t v) { le(v); }
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
  // Patches the payload length, appends the signer's key, its signature
  // and the CRC.
  Bytes finish(const Identity &signer);

 private:
  template <typename T>
  void le(T v) {  // little-endian, whatever the host
    for (size_t i = 0; i < sizeof v; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
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
  bool u16(uint16_t *v) { return le(v, "a 16-bit field"); }
  bool u32(uint32_t *v) { return le(v, "a 32-bit field"); }
  bool u64(uint64_t *v) { return le(v, "a 64-bit field"); }
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
  template <typename T>
  bool le(T *v, const char *what) {  // little-endian, whatever the host
    if (!need(sizeof *v, what)) return false;
    T r = 0;
    for (size_t i = 0; i < sizeof *v; ++i) r = T(r | T(T(p_[pos_ + i]) << (8 * i)));
    pos_ += sizeof *v;
    *v = r;
    return true;
  }
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

// Checks the frame and its signature and, on success, points *payload at
// the payload and sets *signer to the signing peer's id.
bool open_frame(uint64_t run, uint8_t kind, const uint8_t *data, size_t len, Reader *payload, uint64_t *signer,
                std::string *why);
// A record speaks for `claimed`: only that peer may have signed it.
bool check_signer(Reader &r, const char *role, uint64_t claimed, uint64_t signer);
// Encoding refuses a record that speaks for another peer than its signer.
void require_signer(uint64_t claimed, const Identity &signer, const char *role);
// Ends a payload parse: every byte read, no read failed.
bool close_payload(const Reader &r, std::string *why);
bool read_string(Reader &r, std::string *s, const char *field);
bool check_epoch(Reader &r, int64_t epoch);
// Encoding refuses what decoding would: throws std::invalid_argument.
void require(bool ok, const std::string &what);
void write_members(Writer &w, const std::vector<uint64_t> &members);

}  // namespace record_frame
}  // namespace loom_collab

#endif
