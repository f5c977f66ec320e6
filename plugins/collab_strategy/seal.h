/* SPDX-License-Identifier: Apache-2.0 */
// What a swarm key (plugins/common/swarm_key.h) protects in the DHT: where a
// key's values live and what they say. libsodium stays inside seal.cpp.
//
// From the swarm key, derive_subkey (libsodium's KDF, BLAKE2b) gives one
// subkey per use:
//  - a location key: a DHT key name's location is the keyed BLAKE2b of the
//    name, so an outsider who knows the run_id cannot even find the swarm's
//    records (without a key the location is OpenDHT's SHA-1 of the name);
//  - a sealing key: each value is sealed with XChaCha20-Poly1305 under a
//    random 24-byte nonce, with the value's envelope and location as
//    associated data, so it can be neither read, altered, nor moved to
//    another key or another expiry by anyone without the swarm key.
// Thread-safe: every member is const after construction.
#ifndef LOOM_COLLAB_SEAL_H
#define LOOM_COLLAB_SEAL_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "records.h"
#include "../common/swarm_key.h"

namespace loom_collab {

// The subkeys derived from a swarm key, one per use, so that no two uses
// ever share a key.
enum class Subkey : uint64_t {
  location = 1,  // where a DHT key's values live (Sealer)
  seal = 2,      // sealing DHT values (Sealer)
  proof = 3,     // a state transfer's proofs (StateKeys, state_secret.h)
  stream = 4,    // a state transfer's stream keys (StateKeys)
};
// libsodium's KDF (BLAKE2b) of the swarm key for one use. Throws
// std::runtime_error if libsodium cannot start.
std::array<uint8_t, 32> derive_subkey(const loom_key::SwarmKey &key, Subkey use);

// Associated data that binds a sealed message to one use and one run:
// the use's name, then the run's hash (little-endian), so that what was
// sealed for one use or run never opens as another's.
Bytes use_ad(const char *use, uint64_t run);

class Sealer {
 public:
  static constexpr size_t kLocationBytes = 20;  // an OpenDHT InfoHash
  static constexpr size_t kOverhead = 24 + 16;  // nonce + tag
  using Location = std::array<uint8_t, kLocationBytes>;

  // Derives the subkeys. Throws std::runtime_error if libsodium cannot start.
  explicit Sealer(const loom_key::SwarmKey &key);
  ~Sealer();  // wipes the subkeys
  Sealer(const Sealer &) = delete;
  Sealer &operator=(const Sealer &) = delete;

  Location location(const std::string &name) const;
  // nonce || ciphertext || tag of msg, bound to ad.
  Bytes seal(const uint8_t *msg, size_t n, const uint8_t *ad, size_t ad_len) const;
  // False (out untouched) unless sealed was made by seal() with this swarm
  // key and the same ad.
  bool open(const uint8_t *sealed, size_t n, const uint8_t *ad, size_t ad_len, Bytes *out) const;

 private:
  std::array<uint8_t, 32> location_key_{};
  std::array<uint8_t, 32> seal_key_{};
};

}  // namespace loom_collab

#endif
