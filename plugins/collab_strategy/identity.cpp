// SPDX-License-Identifier: Apache-2.0
#include "identity.h"

#include <sodium.h>

#include <cstring>
#include <stdexcept>

namespace loom_collab {
namespace {

// Domain separation: this hash of a public key means "peer id" and nothing else.
constexpr char kIdContext[] = "loom peer id 1";

void start_sodium() {
  if (sodium_init() < 0) throw std::runtime_error("libsodium could not start (sodium_init failed)");
}

}  // namespace

uint64_t peer_id_of(const PublicKey &pk) {
  uint8_t h[crypto_generichash_BYTES_MIN];  // 16 bytes; the first 8 are the id
  uint8_t msg[sizeof kIdContext - 1 + kPublicKeyBytes];
  std::memcpy(msg, kIdContext, sizeof kIdContext - 1);
  std::memcpy(msg + sizeof kIdContext - 1, pk.data(), pk.size());
  crypto_generichash(h, sizeof h, msg, sizeof msg, nullptr, 0);
  uint64_t id = 0;
  for (int i = 0; i < 8; ++i) id |= static_cast<uint64_t>(h[i]) << (8 * i);
  return id;
}

bool verify_signature(const PublicKey &pk, const Signature &sig, const uint8_t *msg, size_t n) {
  return crypto_sign_verify_detached(sig.data(), msg, n, pk.data()) == 0;
}

Digest::Digest() {
  static_assert(sizeof(crypto_generichash_state) <= sizeof(state_), "Digest::state_ is too small");
  start_sodium();
  crypto_generichash_init(reinterpret_cast<crypto_generichash_state *>(state_), nullptr, 0, 16);
}

void Digest::update(const void *data, size_t n) {
  if (n == 0) return;
  crypto_generichash_update(reinterpret_cast<crypto_generichash_state *>(state_),
                            static_cast<const uint8_t *>(data), n);
}

uint64_t Digest::finish() {
  uint8_t h[16];
  crypto_generichash_final(reinterpret_cast<crypto_generichash_state *>(state_), h, sizeof h);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(h[i]) << (8 * i);
  return v;
}

Identity::Identity() {
  static_assert(crypto_sign_PUBLICKEYBYTES == kPublicKeyBytes && crypto_sign_BYTES == kSignatureBytes &&
                crypto_sign_SECRETKEYBYTES == 64);
  start_sodium();
  do {
    crypto_sign_keypair(pk_.data(), sk_.data());
    id_ = peer_id_of(pk_);
  } while (id_ == 0);
}

Identity::~Identity() { sodium_memzero(sk_.data(), sk_.size()); }

Signature Identity::sign(const uint8_t *msg, size_t n) const {
  Signature sig{};
  crypto_sign_detached(sig.data(), nullptr, msg, n, sk_.data());
  return sig;
}

}  // namespace loom_collab
