/* SPDX-License-Identifier: Apache-2.0 */
// A peer's identity: an Ed25519 key pair (libsodium), made afresh by each
// process, and the peer id that derives from its public key. Every swarm
// record carries its signer's public key and signature (records.h), so a
// record that claims to come from a peer is accepted only if that peer's
// key signed it: nobody can forge another's progress, goodbye, join, group
// or address. libsodium stays inside identity.cpp.
//
// Peer ids stay 64-bit (they fill group member lists and DHT value ids):
// the first 8 bytes of a BLAKE2b hash of the public key. Taking over a given
// peer's id needs a key pair whose hash hits those 64 bits: about 2^64
// key generations, out of reach; two honest ids collide with chance
// n^2 / 2^65 (1e-11 for 20,000 peers).
#ifndef LOOM_COLLAB_IDENTITY_H
#define LOOM_COLLAB_IDENTITY_H

#include <array>
#include <cstddef>
#include <cstdint>

namespace loom_collab {

constexpr size_t kPublicKeyBytes = 32;
constexpr size_t kSignatureBytes = 64;
using PublicKey = std::array<uint8_t, kPublicKeyBytes>;
using Signature = std::array<uint8_t, kSignatureBytes>;

// The peer id of a public key.
uint64_t peer_id_of(const PublicKey &pk);

// True when sig is pk's Ed25519 signature of msg.
bool verify_signature(const PublicKey &pk, const Signature &sig, const uint8_t *msg, size_t n);

// A 64-bit digest (BLAKE2b) of a sequence of byte ranges, as if they were
// one: what peers publish of their parameters after each state averaging
// (records.h, ProgressRecord::sync_hash). Finding other parameters with the
// same digest takes about 2^64 tries.
class Digest {
 public:
  Digest();
  void update(const void *data, size_t n);
  uint64_t finish();  // once

 private:
  alignas(64) uint8_t state_[384];  // crypto_generichash_state (checked in identity.cpp)
};

class Identity {
 public:
  // A fresh key pair from libsodium's generator (never id 0, which the swarm
  // reserves). Throws std::runtime_error if libsodium cannot start.
  Identity();
  ~Identity();  // wipes the secret key
  Identity(const Identity &) = delete;
  Identity &operator=(const Identity &) = delete;

  uint64_t id() const { return id_; }
  const PublicKey &public_key() const { return pk_; }
  Signature sign(const uint8_t *msg, size_t n) const;

 private:
  PublicKey pk_{};
  std::array<uint8_t, 64> sk_{};
  uint64_t id_ = 0;
};

}  // namespace loom_collab

#endif
