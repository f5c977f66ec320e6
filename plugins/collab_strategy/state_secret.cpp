// SPDX-License-Identifier: Apache-2.0
#include "state_secret.h"

#include "seal.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <sodium.h>

#include <cstring>
#include <stdexcept>

namespace loom_collab {
namespace {

static_assert(crypto_auth_BYTES == StateKeys::kProofBytes);
static_assert(crypto_auth_KEYBYTES == 32);
static_assert(crypto_secretstream_xchacha20poly1305_HEADERBYTES == StreamSealer::kHeaderBytes);
static_assert(crypto_secretstream_xchacha20poly1305_ABYTES == StreamSealer::kTagBytes);
static_assert(crypto_secretstream_xchacha20poly1305_KEYBYTES == 32);
constexpr size_t kGcmNonceBytes = 12;

void chunk_nonce(uint64_t index, uint8_t n[kGcmNonceBytes]) {
  std::memset(n, 0, kGcmNonceBytes);
  for (int i = 0; i < 8; ++i) n[i] = uint8_t(index >> (8 * i));
}

// One AES-256-GCM context, for one call: contexts are not shared between threads.
class Gcm {
 public:
  explicit Gcm(const std::array<uint8_t, ChunkKey::kKeyBytes> &key) {
    gnutls_datum_t k{const_cast<uint8_t *>(key.data()), unsigned(key.size())};
    rc_ = gnutls_aead_cipher_init(&h_, GNUTLS_CIPHER_AES_256_GCM, &k);
  }
  ~Gcm() {
    if (rc_ == 0) gnutls_aead_cipher_deinit(h_);
  }
  Gcm(const Gcm &) = delete;
  Gcm &operator=(const Gcm &) = delete;
  int rc() const { return rc_; }
  gnutls_aead_cipher_hd_t get() const { return h_; }

 private:
  gnutls_aead_cipher_hd_t h_{};
  int rc_;
};

}  // namespace

StateKeys::StateKeys(const loom_key::SwarmKey &key)
    : proof_key_(derive_subkey(key, Subkey::proof)), stream_key_(derive_subkey(key, Subkey::stream)) {}

StateKeys::~StateKeys() {
  sodium_memzero(proof_key_.data(), proof_key_.size());
  sodium_memzero(stream_key_.data(), stream_key_.size());
}

StateKeys::Nonce StateKeys::fresh_nonce() {
  if (sodium_init() < 0) throw std::runtime_error("libsodium could not start (sodium_init failed)");
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

StateKeys::Proof StateKeys::proof(Role role, const uint8_t *request, size_t request_len, const Nonce &server,
                                  const Nonce &client) const {
  crypto_auth_hmacsha512256_state st;
  crypto_auth_hmacsha512256_init(&st, proof_key_.data(), proof_key_.size());
  const uint8_t r = role;
  crypto_auth_hmacsha512256_update(&st, &r, 1);
  crypto_auth_hmacsha512256_update(&st, request, request_len);
  crypto_auth_hmacsha512256_update(&st, server.data(), server.size());
  crypto_auth_hmacsha512256_update(&st, client.data(), client.size());
  Proof out;
  crypto_auth_hmacsha512256_final(&st, out.data());
  return out;
}

bool StateKeys::verify(Role role, const uint8_t *request, size_t request_len, const Nonce &server, const Nonce &client,
                       const uint8_t *given) const {
  const Proof want = proof(role, request, request_len, server, client);
  return sodium_memcmp(want.data(), given, want.size()) == 0;
}

std::array<uint8_t, 32> StateKeys::stream_key(const Nonce &server, const Nonce &client) const {
  uint8_t both[2 * kNonceBytes];
  std::memcpy(both, server.data(), kNonceBytes);
  std::memcpy(both + kNonceBytes, client.data(), kNonceBytes);
  std::array<uint8_t, 32> out;
  crypto_generichash(out.data(), out.size(), both, sizeof both, stream_key_.data(), stream_key_.size());
  return out;
}

struct StreamSealer::State {
  crypto_secretstream_xchacha20poly1305_state st;
};

StreamSealer::StreamSealer(const std::array<uint8_t, 32> &key, uint8_t header[kHeaderBytes]) : s_(new State) {
  crypto_secretstream_xchacha20poly1305_init_push(&s_->st, header, key.data());
}

StreamSealer::~StreamSealer() { sodium_memzero(&s_->st, sizeof s_->st); }

void StreamSealer::frame(const uint8_t *plain, size_t n, bool final, Bytes *out) {
  if (n > kMaxFramePlain) throw std::invalid_argument("a stream frame of more than kMaxFramePlain bytes");
  const size_t at = out->size();
  const size_t len = n + crypto_secretstream_xchacha20poly1305_ABYTES;
  out->resize(at + 4 + len);
  for (int i = 0; i < 4; ++i) (*out)[at + i] = uint8_t(uint32_t(len) >> (8 * i));
  crypto_secretstream_xchacha20poly1305_push(&s_->st, out->data() + at + 4, nullptr, plain, n, nullptr, 0,
                                             final ? crypto_secretstream_xchacha20poly1305_TAG_FINAL : 0);
}

struct StreamOpener::State {
  crypto_secretstream_xchacha20poly1305_state st;
};

StreamOpener::StreamOpener(const std::array<uint8_t, 32> &key, const uint8_t header[StreamSealer::kHeaderBytes])
    : s_(new State) {
  ok_ = crypto_secretstream_xchacha20poly1305_init_pull(&s_->st, header, key.data()) == 0;
}

StreamOpener::~StreamOpener() { sodium_memzero(&s_->st, sizeof s_->st); }

bool StreamOpener::open(const uint8_t *cipher, size_t n, Bytes *plain, bool *final) {
  if (!ok_ || n < crypto_secretstream_xchacha20poly1305_ABYTES) return false;
  plain->resize(n - crypto_secretstream_xchacha20poly1305_ABYTES);
  unsigned long long len = 0;
  unsigned char tag = 0;
  if (crypto_secretstream_xchacha20poly1305_pull(&s_->st, plain->data(), &len, &tag, cipher, n, nullptr, 0) != 0) {
    ok_ = false;  // a stream that failed once is over
    return false;
  }
  plain->resize(size_t(len));
  *final = tag == crypto_secretstream_xchacha20poly1305_TAG_FINAL;
  return true;
}

void wipe(void *p, size_t n) { sodium_memzero(p, n); }

ChunkKey ChunkKey::fresh() {
  if (sodium_init() < 0) throw std::runtime_error("libsodium could not start (sodium_init failed)");
  ChunkKey k;
  randombytes_buf(k.key_.data(), k.key_.size());
  return k;
}

ChunkKey::ChunkKey(const uint8_t *key) { std::memcpy(key_.data(), key, kKeyBytes); }

ChunkKey::~ChunkKey() { sodium_memzero(key_.data(), key_.size()); }

ChunkKey::Tag ChunkKey::seal(uint64_t index, uint8_t *bytes, size_t n, const uint8_t *ad, size_t ad_len) const {
  uint8_t nonce[kGcmNonceBytes];
  chunk_nonce(index, nonce);
  Tag tag;
  size_t tag_len = tag.size();
  Gcm gcm(key_);
  giovec_t data{bytes, n}, extra{const_cast<uint8_t *>(ad), ad_len};
  const int rc = gcm.rc() != 0 ? gcm.rc()
                               : gnutls_aead_cipher_encryptv2(gcm.get(), nonce, sizeof nonce, &extra, 1, &data, 1,
                                                              tag.data(), &tag_len);
  if (rc != 0 || tag_len != tag.size())
    throw std::runtime_error(std::string("AES-256-GCM (GnuTLS) failed: ") + gnutls_strerror(rc));
  return tag;
}

bool ChunkKey::open(uint64_t index, uint8_t *bytes, size_t n, const uint8_t *ad, size_t ad_len,
                    const uint8_t *tag) const {
  uint8_t nonce[kGcmNonceBytes];
  chunk_nonce(index, nonce);
  Gcm gcm(key_);
  if (gcm.rc() != 0) return false;
  giovec_t data{bytes, n}, extra{const_cast<uint8_t *>(ad), ad_len};
  return gnutls_aead_cipher_decryptv2(gcm.get(), nonce, sizeof nonce, &extra, 1, &data, 1,
                                      const_cast<uint8_t *>(tag), kTagBytes) == 0;
}

}  // namespace loom_collab
