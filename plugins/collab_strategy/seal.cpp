// SPDX-License-Identifier: Apache-2.0
#include "seal.h"

#include <cstring>

#include <sodium.h>

#include <stdexcept>

namespace loom_collab {
namespace {

constexpr char kContext[crypto_kdf_CONTEXTBYTES] = {'l', 'o', 'o', 'm', 's', 'w', 'r', 'm'};

static_assert(crypto_kdf_KEYBYTES == loom_key::kKeyBytes, "a swarm key is a libsodium KDF master key");
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES ==
              Sealer::kOverhead);

}  // namespace

std::array<uint8_t, 32> derive_subkey(const loom_key::SwarmKey &key, Subkey use) {
  if (sodium_init() < 0) throw std::runtime_error("libsodium could not start (sodium_init failed)");
  std::array<uint8_t, 32> out;
  crypto_kdf_derive_from_key(out.data(), out.size(), uint64_t(use), kContext, key.data());
  return out;
}

Sealer::Sealer(const loom_key::SwarmKey &key)
    : location_key_(derive_subkey(key, Subkey::location)), seal_key_(derive_subkey(key, Subkey::seal)) {}

Sealer::~Sealer() {
  sodium_memzero(location_key_.data(), location_key_.size());
  sodium_memzero(seal_key_.data(), seal_key_.size());
}

Sealer::Location Sealer::location(const std::string &name) const {
  Location out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char *>(name.data()), name.size(),
                     location_key_.data(), location_key_.size());
  return out;
}

Bytes Sealer::seal(const uint8_t *msg, size_t n, const uint8_t *ad, size_t ad_len) const {
  Bytes out(kOverhead + n);
  uint8_t *nonce = out.data();
  randombytes_buf(nonce, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
  unsigned long long len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out.data() + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, &len, msg, n,
                                             ad, ad_len, nullptr, nonce, seal_key_.data());
  out.resize(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + size_t(len));
  return out;
}

bool Sealer::open(const uint8_t *sealed, size_t n, const uint8_t *ad, size_t ad_len, Bytes *out) const {
  if (n < kOverhead) return false;
  const uint8_t *nonce = sealed;
  const uint8_t *ct = sealed + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
  const size_t ct_len = n - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
  Bytes plain(ct_len - crypto_aead_xchacha20poly1305_ietf_ABYTES);
  unsigned long long len = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(plain.data(), &len, nullptr, ct, ct_len, ad, ad_len, nonce,
                                                 seal_key_.data()) != 0)
    return false;
  plain.resize(size_t(len));
  *out = std::move(plain);
  return true;
}

Bytes use_ad(const char *use, uint64_t run) {
  Bytes out(use, use + std::strlen(use));
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(run >> (8 * i)));
  return out;
}

}  // namespace loom_collab
