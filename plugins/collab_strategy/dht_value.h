/* SPDX-License-Identifier: Apache-2.0 */
// The swarm's values in OpenDHT (internal to dht.cpp): an envelope before
// each record (dht.cpp's header comment says what it holds and why), the
// stamp that orders puts of one id, and the value type whose store and
// edit policies keep only live values and let a newer stamp replace an
// older one.
#ifndef LOOM_COLLAB_DHT_VALUE_H
#define LOOM_COLLAB_DHT_VALUE_H

#include <opendht/value.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "seal.h"

namespace loom_collab::swarm_value {

constexpr dht::ValueType::Id kTypeId = 0x4c4d;  // "LM"; OpenDHT's own types use small ids
constexpr auto kMaxTtl = std::chrono::minutes(10);  // the type's expiration: the longest ttl a put gets
constexpr size_t kEnvelope = 1 + 8 + 8;
constexpr uint8_t kEnvelopeVersion = 1;
constexpr uint8_t kSealedVersion = 2;
// Value ids are an OpenDHT detail: 0 means "pick one at random", so ours are
// XOR-ed with a constant and that single caller id is refused.
constexpr uint64_t kIdMask = 0x9e3779b97f4a7c15ULL;

int64_t now_ms();  // the wall clock, ms since the Unix epoch
uint64_t load64(const uint8_t *p);  // little-endian
void store64(uint8_t *p, uint64_t v);

struct Envelope {
  int64_t expiry_ms = 0;
  uint64_t stamp = 0;
  bool sealed = false;
};

// False for a value of another type, too short, or of an unknown version.
bool parse_envelope(const dht::Value &v, Envelope *e);
// A sealed value's associated data: its envelope and where it is stored.
std::array<uint8_t, kEnvelope + Sealer::kLocationBytes> associated(const uint8_t *envelope, const dht::InfoHash &at);
// Strictly increasing per process, close to wall-clock microseconds, so a
// re-put after a restart still outranks the previous process's value.
uint64_t next_stamp();
// The value type every swarm value is put with (registered on each node).
const dht::ValueType &swarm_type();

}  // namespace loom_collab::swarm_value

#endif
