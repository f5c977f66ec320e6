// A state transfer in a swarm with a key (state_transfer.h has the wire):
// each side proves it holds the swarm key over a fresh exchange, and the
// reply travels as an encrypted, authenticated stream. libsodium stays
// inside state_secret.cpp.
//
// From the swarm key, libsodium's KDF derives a proof key and a stream key
// (Subkey::proof and Subkey::stream, seal.h). A proof is crypto_auth
// (HMAC-SHA-512-256) over the role, the request and both sides' nonces; the
// stream is crypto_secretstream (XChaCha20-Poly1305) under the keyed BLAKE2b
// of both nonces, so every transfer has a key of its own, and its frames can
// be neither read, altered, reordered, cut short nor replayed.
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

}  // namespace loom_collab

#endif
