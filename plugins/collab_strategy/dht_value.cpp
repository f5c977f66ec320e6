// SPDX-License-Identifier: Apache-2.0
#include "dht_value.h"

#include <algorithm>
#include <atomic>

namespace loom_collab::swarm_value {

using namespace std::chrono;

namespace {

bool store_policy(dht::InfoHash, const std::shared_ptr<dht::Value> &v, const dht::InfoHash &, const dht::SockAddr &) {
  Envelope e;
  return v && v->data.size() <= dht::MAX_VALUE_SIZE && parse_envelope(*v, &e) && e.expiry_ms > now_ms();
}

bool edit_policy(dht::InfoHash key, const std::shared_ptr<dht::Value> &old_v, std::shared_ptr<dht::Value> &new_v,
                 const dht::InfoHash &from, const dht::SockAddr &addr) {
  Envelope a, b;
  if (!old_v || !new_v || !parse_envelope(*old_v, &a)) return new_v && store_policy(key, new_v, from, addr);
  return store_policy(key, new_v, from, addr) && parse_envelope(*new_v, &b) && b.stamp > a.stamp;
}

}  // namespace

int64_t now_ms() { return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count(); }

uint64_t load64(const uint8_t *p) {
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(p[i]) << (8 * i);
  return r;
}
void store64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

bool parse_envelope(const dht::Value &v, Envelope *e) {
  if (v.type != kTypeId || v.data.size() < kEnvelope) return false;
  if (v.data[0] != kEnvelopeVersion && v.data[0] != kSealedVersion) return false;
  e->expiry_ms = static_cast<int64_t>(load64(v.data.data() + 1));
  e->stamp = load64(v.data.data() + 9);
  e->sealed = v.data[0] == kSealedVersion;
  return true;
}

std::array<uint8_t, kEnvelope + Sealer::kLocationBytes> associated(const uint8_t *envelope, const dht::InfoHash &at) {
  std::array<uint8_t, kEnvelope + Sealer::kLocationBytes> ad{};
  std::copy(envelope, envelope + kEnvelope, ad.begin());
  std::copy(at.data(), at.data() + Sealer::kLocationBytes, ad.begin() + kEnvelope);
  return ad;
}

uint64_t next_stamp() {
  static std::atomic<uint64_t> last{0};
  const uint64_t now = static_cast<uint64_t>(duration_cast<microseconds>(system_clock::now().time_since_epoch()).count());
  uint64_t prev = last.load();
  uint64_t next;
  do {
    next = now > prev ? now : prev + 1;
  } while (!last.compare_exchange_weak(prev, next));
  return next;
}

const dht::ValueType &swarm_type() {
  static const dht::ValueType type(kTypeId, "loom-swarm", kMaxTtl, store_policy, edit_policy);
  return type;
}

}  // namespace loom_collab::swarm_value
