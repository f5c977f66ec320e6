// SPDX-License-Identifier: Apache-2.0
// Grants of a short round's top-up (top_up_grants.h): their wire form and
// the hub's books.
#include "top_up_grants.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loom_collab {
namespace {

constexpr uint8_t kAskMagic[4] = {'L', 'G', 'R', 'A'};
constexpr uint8_t kGrantMagic[4] = {'L', 'G', 'R', 'G'};
constexpr uint8_t kGrantVersion = 1;
constexpr size_t kAskSize = 4 + 1 + 8 + 4 + 4 + 8 + 8 + 8 + 8 + 4;
constexpr size_t kGrantSize = 4 + 1 + 8 + 8 + 4;
// 2^53: samples counted in doubles stay exact below it.
constexpr double kMaxSamples = 9007199254740992.0;
constexpr uint32_t kMaxGroupMembers = 4096;  // a group record's own bound (records_frame.h)

uint32_t crc_of(const uint8_t *p, size_t n) { return uint32_t(crc32_z(0, p, n)); }

struct Out {
  Bytes b;
  template <typename T>
  void le(T v) {
    for (size_t i = 0; i < sizeof v; ++i) b.push_back(uint8_t(uint64_t(v) >> (8 * i)));
  }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    le(bits);
  }
  void close() { le(crc_of(b.data(), b.size())); }
};

// Both messages open with their magic and the version.
Out begin(const uint8_t magic[4]) {
  Out o;
  o.b.assign(magic, magic + 4);
  o.le(kGrantVersion);
  return o;
}

struct In {
  const uint8_t *p;
  template <typename T>
  T le() {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(p[i]) << (8 * i);
    p += sizeof(T);
    return T(v);
  }
  double f64() {
    const uint64_t bits = le<uint64_t>();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
};

// The frame both share: size, magic, version, CRC. Leaves `in` after the version.
bool open_frame(const uint8_t *data, size_t len, const uint8_t magic[4], size_t size, const char *what, In *in,
                std::string *why) {
  if (len != size || std::memcmp(data, magic, 4) != 0) {
    *why = std::string("not a ") + what + " (" + std::to_string(len) + " bytes; one is " + std::to_string(size) +
           " bytes starting with \"" + std::string(reinterpret_cast<const char *>(magic), 4) + "\")";
    return false;
  }
  if (data[4] != kGrantVersion) {
    *why = std::string("a ") + what + " of version " + std::to_string(data[4]) + "; this peer speaks " +
           std::to_string(kGrantVersion);
    return false;
  }
  In crc{data + size - 4};
  if (crc.le<uint32_t>() != crc_of(data, size - 4)) {
    *why = std::string("a ") + what + " with a bad checksum";
    return false;
  }
  *in = In{data + 5};
  return true;
}

}  // namespace

Bytes encode_grant_ask(const GrantAsk &a) {
  Out o = begin(kAskMagic);
  o.le(a.group_hash);
  o.le(a.size);
  o.le(a.rank);
  o.f64(a.deficit);
  o.le(a.batch);
  o.f64(a.share);
  o.le(a.min_samples);
  o.close();
  return o.b;
}

bool is_grant_ask(const Bytes &b) { return b.size() >= 4 && std::memcmp(b.data(), kAskMagic, 4) == 0; }

std::optional<GrantAsk> decode_grant_ask(const uint8_t *data, size_t len, std::string *why) {
  In in{nullptr};
  if (!open_frame(data, len, kAskMagic, kAskSize, "grant ask", &in, why)) return std::nullopt;
  GrantAsk a;
  a.group_hash = in.le<uint64_t>();
  a.size = in.le<uint32_t>();
  a.rank = in.le<uint32_t>();
  a.deficit = in.f64();
  a.batch = in.le<uint64_t>();
  a.share = in.f64();
  a.min_samples = in.le<uint64_t>();
  if (a.size < 2 || a.size > kMaxGroupMembers || a.rank >= a.size) {
    *why = "a grant ask for rank " + std::to_string(a.rank) + " of a group of " + std::to_string(a.size) +
           " (a group has 2 to " + std::to_string(kMaxGroupMembers) + " members, ranks from 0)";
    return std::nullopt;
  }
  if (!(a.deficit > 0 && a.deficit <= kMaxSamples) || a.batch < 1 || double(a.batch) > kMaxSamples) {
    *why = "a grant ask with a deficit of " + std::to_string(a.deficit) + " samples in batches of " +
           std::to_string(a.batch) + " (both from 1 to 2^53)";
    return std::nullopt;
  }
  if (double(a.min_samples) > kMaxSamples) {
    *why = "a grant ask for at least " + std::to_string(a.min_samples) + " samples (at most 2^53)";
    return std::nullopt;
  }
  if (!(a.share > 0 && a.share <= 1)) {
    *why = "a grant ask with a share of " + std::to_string(a.share) + " of its group's rate (above 0, at most 1)";
    return std::nullopt;
  }
  return a;
}

Bytes encode_grant(const Grant &g) {
  Out o = begin(kGrantMagic);
  o.le(g.samples);
  o.f64(g.left);
  o.close();
  return o.b;
}

std::optional<Grant> decode_grant(const uint8_t *data, size_t len, std::string *why) {
  In in{nullptr};
  if (!open_frame(data, len, kGrantMagic, kGrantSize, "grant", &in, why)) return std::nullopt;
  Grant g;
  g.samples = in.le<uint64_t>();
  g.left = in.f64();
  if (double(g.samples) > kMaxSamples || !std::isfinite(g.left)) {
    *why = "a grant of " + std::to_string(g.samples) + " samples with " + std::to_string(g.left) +
           " left (at most 2^53, and a finite number left)";
    return std::nullopt;
  }
  return g;
}

uint64_t grant_size(double left, double share, uint64_t batch, uint64_t min_samples) {
  if (!(left > 0)) return 0;
  const uint64_t b = std::max<uint64_t>(1, batch);
  const double s = share > 0 && share <= 1 ? share : 1.0;
  const double l = std::min(left, kMaxSamples);
  const uint64_t by_fraction = uint64_t(std::floor(l * s * kGrantFraction / double(b)));
  const uint64_t least = (std::min<uint64_t>(min_samples, uint64_t(kMaxSamples)) + b - 1) / b;
  const uint64_t covering = uint64_t(std::ceil(l / double(b)));  // what is left, in whole batches
  return std::max<uint64_t>({1, by_fraction, std::min(least, covering)}) * b;
}

std::optional<Grant> GrantLedger::grant(const GrantAsk &ask, std::string *why) {
  std::lock_guard<std::mutex> g(m_);
  const auto now = Clock::now();
  for (auto it = groups_.begin(); it != groups_.end();)
    it = now - it->second.touched > kKeep ? groups_.erase(it) : std::next(it);
  const auto key = std::make_pair(ask.group_hash, ask.size);
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxGroups) {
      groups_.erase(std::min_element(groups_.begin(), groups_.end(), [](const auto &a, const auto &b) {
        return a.second.touched < b.second.touched;
      }));
    }
    it = groups_.emplace(key, Group{ask.deficit, ask.deficit, now}).first;
  }
  Group &group = it->second;
  if (ask.deficit != group.deficit) {
    *why = "an ask for group " + hex64(ask.group_hash) + " names a deficit of " + std::to_string(ask.deficit) +
           " samples; its first ask named " + std::to_string(group.deficit);
    return std::nullopt;
  }
  group.touched = now;
  Grant out;
  out.samples = grant_size(group.left, ask.share, ask.batch, ask.min_samples);
  group.left -= double(out.samples);
  out.left = std::max(0.0, group.left);
  ++asks_;
  return out;
}

uint64_t GrantLedger::asks() const {
  std::lock_guard<std::mutex> g(m_);
  return asks_;
}

}  // namespace loom_collab
