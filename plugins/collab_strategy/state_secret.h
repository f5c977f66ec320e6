/* SPDX-License-Identifier: Apache-2.0 */
// A state transfer in a swarm with a key (state_transfer.h has the wire):
// each side proves it holds the swarm key over a fresh exchange, the reply's
// header travels in an encrypted, authenticated stream of the transfer's
// own, and the state's chunks travel as the donor sealed them once for
// every joiner. libsodium and GnuTLS stay inside state_secret.cpp.
//
// From the swarm key, libsodium's KDF derives a proof key and a stream key
// (Subkey::proof and Subkey::stream, seal.h). A proof is crypto_auth
// (HMAC-SHA-512-256) over the role, the request and both sides' nonces; the
// stream is crypto_secretstream (XChaCha20-Poly1305) under the keyed BLAKE2b
// of both nonces, so every transfer has a key of its own, and its frames can
// be neither read, altered, reordered, cut short nor replayed.
//
// The chunks: encrypting a state per transfer cost the donor a core for
// each joiner and made a load 3.3 times the open one. So a donor seals each
// snapshot once, in place and off the training thread (where an open swarm
// computes the chunks' CRCs), under a random ChunkKey of the snapshot's own,
// and sends that key to each proven joiner inside the transfer's stream.
// A chunk's nonce is its index and its additional data the reply header,
// so chunks can be neither altered, reordered, nor moved to another
// snapshot or position; the header (in the stream) says how many follow.
// Every proven joiner of a snapshot gets the same chunk key; each could ask
// for that snapshot anyway, so sharing it gives nothing away, while
// outsiders who recorded a transfer can open neither the stream nor the key.
// The chunks use AES-256-GCM from GnuTLS (3.7 GB/s a core here, with the
// CPU's AES instructions, against 1.3 GB/s for libsodium's XChaCha20 and
// 5.5 GB/s for the CRC an open swarm checks), so a keyed load costs little
// more than an open one.
#ifndef LOOM_COLLAB_STATE_SECRET_H
#define LOOM_COLLAB_STATE_SECRET_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "records.h"
#include "../common/swarm_key.h"

namespace loom_collab {

class StateKeys {
 public:
  static constexpr size_t kNonceBytes = 32;
  static constexpr size_t kProofBytes = 32;
  enum Role : uint8_t { kClient = 'C', kServer = 'S' };
  using Nonce = std::array<uint8_t, kNonceBytes>;
  using Proof = std::array<uint8_t, kProofBytes>;

  // Throws std::runtime_error if libsodium cannot start.
  explicit StateKeys(const loom_key::SwarmKey &key);
  ~StateKeys();  // wipes the subkeys
  StateKeys(const StateKeys &) = delete;
  StateKeys &operator=(const StateKeys &) = delete;

  static Nonce fresh_nonce();
  Proof proof(Role role, const uint8_t *request, size_t request_len, const Nonce &server, const Nonce &client) const;
  // Constant time.
  bool verify(Role role, const uint8_t *request, size_t request_len, const Nonce &server, const Nonce &client,
              const uint8_t *proof) const;
  std::array<uint8_t, 32> stream_key(const Nonce &server, const Nonce &client) const;

 private:
  std::array<uint8_t, 32> proof_key_{};
  std::array<uint8_t, 32> stream_key_{};
};

// The sending side of one stream. Frames on the wire: length u32 (of what
// follows) then the ciphertext of at most kMaxFramePlain bytes.
class StreamSealer {
 public:
  static constexpr size_t kHeaderBytes = 24;
  static constexpr size_t kTagBytes = 17;  // secretstream's tag and MAC, in every frame
  static constexpr size_t kFrameOverhead = 4 + kTagBytes;  // with the length
  static constexpr size_t kMaxFramePlain = 256 * 1024;
  // Fills header, which the receiver needs first.
  StreamSealer(const std::array<uint8_t, 32> &key, uint8_t header[kHeaderBytes]);
  ~StreamSealer();
  // Appends the frame of plain (at most kMaxFramePlain bytes) to out; final
  // marks the last frame of the stream.
  void frame(const uint8_t *plain, size_t n, bool final, Bytes *out);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The receiving side.
class StreamOpener {
 public:
  StreamOpener(const std::array<uint8_t, 32> &key, const uint8_t header[StreamSealer::kHeaderBytes]);
  ~StreamOpener();
  bool ok() const { return ok_; }  // false: a header this key does not open
  // Opens one frame's ciphertext (without its length) into *plain; false
  // when it was altered, out of order or not of this stream.
  bool open(const uint8_t *cipher, size_t n, Bytes *plain, bool *final);

 private:
  struct State;
  std::unique_ptr<State> s_;
  bool ok_ = false;
};

// Overwrites n bytes at p in a way the compiler does not drop (keys on the stack).
void wipe(void *p, size_t n);

// A snapshot's own key: AES-256-GCM with detached tags, in place. The key
// is random and seals one snapshot only, so the chunk's index is a safe
// nonce. Thread-safe: each call has its own cipher context.
class ChunkKey {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kTagBytes = 16;
  using Tag = std::array<uint8_t, kTagBytes>;
  static ChunkKey fresh();                    // throws if no random bytes can be had
  explicit ChunkKey(const uint8_t *key);      // kKeyBytes, as a joiner received it
  ~ChunkKey();                                // wipes the key
  ChunkKey(const ChunkKey &o) : ChunkKey(o.key_.data()) {}
  ChunkKey &operator=(const ChunkKey &) = delete;
  const std::array<uint8_t, kKeyBytes> &bytes() const { return key_; }

  // Encrypts bytes[0, n) in place as chunk `index`, bound to ad; returns its
  // tag. Throws std::runtime_error if GnuTLS fails (it does not, short of memory).
  Tag seal(uint64_t index, uint8_t *bytes, size_t n, const uint8_t *ad, size_t ad_len) const;
  // Decrypts in place; false (bytes unspecified) when the chunk was altered,
  // is another index's, another ad's or another key's.
  bool open(uint64_t index, uint8_t *bytes, size_t n, const uint8_t *ad, size_t ad_len, const uint8_t *tag) const;

 private:
  ChunkKey() = default;
  std::array<uint8_t, kKeyBytes> key_{};
};

}  // namespace loom_collab

#endif
