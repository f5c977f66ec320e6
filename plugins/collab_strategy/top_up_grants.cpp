// SPDX-License-Identifier: Apache-2.0
// Grants of a short round's top-up (top_up_grants.h): their wire form and
// the hub's books.
#include "top_up_grants.h"

#include "records_frame.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loom_collab {
namespace {

constexpr uint8_t kGrantMagic[4] = {'L', 'G', 'R', 'G'};
constexpr uint8_t kGrantVersion = 1;
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

// A grant opens with its magic and the version.
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

// A grant's frame: size, magic, version, CRC. Leaves `in` after the version.
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

Bytes encode_grant_ask(uint64_t run, const GrantAsk &a, const Identity &signer) {
  record_frame::Writer w(run, record_frame::kGrantAsk);
  w.u64(a.group_hash);
  w.u32(a.size);
  w.u32(a.rank);
  w.f64(a.deficit);
  w.u64(a.batch);
  w.f64(a.share);
  w.u64(a.min_samples);
  w.u32(a.seq);
  return w.finish(signer);
}

bool is_grant_ask(const Bytes &b) {
  return b.size() > 5 && std::memcmp(b.data(), record_frame::kMagic, 4) == 0 && b[5] == record_frame::kGrantAsk;
}

std::optional<GrantAsk> decode_grant_ask(uint64_t run, const uint8_t *data, size_t len, std::string *why) {
  record_frame::Reader r(nullptr, 0);
  GrantAsk a;
  if (!record_frame::open_frame(run, record_frame::kGrantAsk, data, len, &r, &a.signer, why)) return std::nullopt;
  if (!(r.u64(&a.group_hash) && r.u32(&a.size) && r.u32(&a.rank) && r.f64(&a.deficit) && r.u64(&a.batch) &&
        r.f64(&a.share) && r.u64(&a.min_samples) && r.u32(&a.seq)) ||
      !record_frame::close_payload(r, why)) {
    if (why->empty()) *why = r.error();
    return std::nullopt;
  }
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
  if (a.seq == 0) {
    *why = "a grant ask numbered 0 (a member numbers its asks of a round from 1)";
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

void GrantLedger::forget_old(Clock::time_point now) {
  for (auto it = groups_.begin(); it != groups_.end();)
    it = now - it->second.touched > kKeep ? groups_.erase(it) : std::next(it);
}

void GrantLedger::lead(const GroupRecord &group) {
  if (group.members.size() < 2) return;  // nobody else to ask
  std::lock_guard<std::mutex> g(m_);
  const auto now = Clock::now();
  forget_old(now);
  const auto key = std::make_pair(group.group_hash(), uint32_t(group.members.size()));
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxGroups) {
      groups_.erase(std::min_element(groups_.begin(), groups_.end(), [](const auto &a, const auto &b) {
        return a.second.touched < b.second.touched;
      }));
    }
    it = groups_.emplace(key, Group{}).first;
    it->second.members = group.members;
    it->second.seq.assign(group.members.size(), 0);
  }
  it->second.touched = now;
}

std::optional<Grant> GrantLedger::grant(const GrantAsk &ask, std::string *why) {
  std::lock_guard<std::mutex> g(m_);
  const auto now = Clock::now();
  forget_old(now);
  auto it = groups_.find(std::make_pair(ask.group_hash, ask.size));
  if (it == groups_.end()) {
    *why = "an ask for group " + hex64(ask.group_hash) + " of " + std::to_string(ask.size) +
           " members, which this hub does not lead (or led over " + std::to_string(kKeep.count()) + " s ago)";
    return std::nullopt;
  }
  Group &group = it->second;
  if (ask.rank >= group.members.size() || group.members[ask.rank] != ask.signer) {
    *why = "an ask for rank " + std::to_string(ask.rank) + " of group " + hex64(ask.group_hash) +
           " signed by peer " + std::to_string(ask.signer) + "; that rank is peer " +
           std::to_string(ask.rank < group.members.size() ? group.members[ask.rank] : 0);
    return std::nullopt;
  }
  if (ask.seq <= group.seq[ask.rank]) {
    *why = "ask " + std::to_string(ask.seq) + " of rank " + std::to_string(ask.rank) + " of group " +
           hex64(ask.group_hash) + " after its ask " + std::to_string(group.seq[ask.rank]) +
           " (an ask sent again, or replayed)";
    return std::nullopt;
  }
  if (group.deficit == 0) {
    group.deficit = ask.deficit;
    group.left = ask.deficit;
  } else if (ask.deficit != group.deficit) {
    *why = "an ask for group " + hex64(ask.group_hash) + " names a deficit of " + std::to_string(ask.deficit) +
           " samples; its first ask named " + std::to_string(group.deficit);
    return std::nullopt;
  }
  group.seq[ask.rank] = ask.seq;
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
