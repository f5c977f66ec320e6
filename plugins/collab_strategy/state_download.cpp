// SPDX-License-Identifier: Apache-2.0
// download_state: a joiner fetches the whole state from donors, checking
// each chunk (its CRC, or with a swarm key its seal) on worker threads while
// the next chunks arrive. The wire
// format is described in state_transfer.h.
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "../common/huge_pages.h"
#include "state_client.h"
#include "state_donor.h"
#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"

namespace loom_collab {

namespace {

using namespace wire;

// Checks chunks on worker threads while the next chunks arrive, so a
// joiner's download is bound by the wire or by the check's speed, not by
// their sum: without a key each chunk's CRC (zlib's crc32_z does about
// 1.3 GB/s on one core here), combined in chunk order into the whole-state
// CRC; with one, each chunk is opened in place under the chunk key
// (XChaCha20-Poly1305, about 1.2 GB/s). Several workers keep up with links
// faster than one core.
class Verifier {
 public:
  // key: the chunk key and the reply header it binds chunks to (null: CRCs).
  Verifier(uint8_t *base, const ChunkKey *key = nullptr, const uint8_t *header = nullptr)
      : base_(base),
        key_(key),
        header_(header),
        max_workers_(std::max(1u, std::min(4u, std::thread::hardware_concurrency() / 2))),
        total_(uint32_t(crc32_z(0, nullptr, 0))) {}
  ~Verifier() {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto &w : workers_) w.join();
  }
  // The chunk's bytes at base+off must stay put and unchanged until finish().
  // want: its CRC, or with a key its tag (ChunkKey::kTagBytes).
  void push(uint64_t index, uint64_t off, uint32_t n, const uint8_t *want) {
    {
      std::lock_guard<std::mutex> g(m_);
      Item it{index, off, n, 0, {}};
      if (key_)
        std::copy(want, want + ChunkKey::kTagBytes, it.tag.begin());
      else
        it.crc = get32(want);
      queue_.push_back(it);
      ++outstanding_;
    }
    cv_.notify_all();
    if (workers_.size() < max_workers_) {
      try {
        workers_.emplace_back([this] { run(); });
      } catch (const std::system_error &) {
        if (workers_.empty()) run_inline();  // no thread at all: check it here
      }
    }
  }
  // A mismatch found so far (non-blocking).
  bool failed(std::string *why) {
    std::lock_guard<std::mutex> g(m_);
    if (bad_.empty()) return false;
    *why = bad_;
    return true;
  }
  // Waits for every pushed chunk (CPU work only, no I/O); the whole CRC or a reason.
  bool finish(uint32_t *total, std::string *why) {
    std::unique_lock<std::mutex> g(m_);
    cv_.wait(g, [&] { return outstanding_ == 0 || !bad_.empty(); });
    if (!bad_.empty()) {
      *why = bad_;
      return false;
    }
    *total = total_;
    return true;
  }

 private:
  struct Item {
    uint64_t index, off;
    uint32_t n, crc;
    ChunkKey::Tag tag;
  };
  void run_inline() {
    std::unique_lock<std::mutex> g(m_);
    while (!queue_.empty() && bad_.empty()) step(g);
  }
  void run() {
    std::unique_lock<std::mutex> g(m_);
    for (;;) {
      cv_.wait(g, [&] { return quit_ || !bad_.empty() || !queue_.empty(); });
      if (quit_ || !bad_.empty()) return;
      if (!step(g)) return;
    }
  }
  // Checks the queue's first chunk (called and returns with g locked); false on a mismatch.
  bool step(std::unique_lock<std::mutex> &g) {
    Item it = queue_.front();
    queue_.pop_front();
    g.unlock();
    if (key_) {
      const bool opened = key_->open(it.index, base_ + it.off, it.n, header_, kStateReplySize, it.tag.data());
      g.lock();
      if (!opened && bad_.empty())
        bad_ = "chunk " + std::to_string(it.index) +
               " of the donor's state does not open (altered, reordered or not of this state)";
      --outstanding_;
      cv_.notify_all();
      return opened;
    }
    uint32_t c = crc(base_ + it.off, it.n);
    g.lock();
    if (c != it.crc) {
      if (bad_.empty())
        bad_ =
            "chunk " + std::to_string(it.index) + " CRC mismatch (computed " + hex(c) + ", sent " + hex(it.crc) + ")";
      cv_.notify_all();
      return false;
    }
    // At most one pending result per worker: fold in every one now in order.
    done_[it.index] = {c, it.n};
    while (!done_.empty() && done_.begin()->first == next_) {
      total_ = uint32_t(crc32_combine(total_, done_.begin()->second.first, z_off_t(done_.begin()->second.second)));
      done_.erase(done_.begin());
      ++next_;
      --outstanding_;
    }
    cv_.notify_all();
    return true;
  }
  uint8_t *base_;
  const ChunkKey *key_;
  const uint8_t *header_;
  const size_t max_workers_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> done_;  // index -> (crc, length), not yet folded
  uint64_t next_ = 0;                                       // the next chunk index to fold into total_
  uint64_t outstanding_ = 0;                                // pushed, not yet folded
  bool quit_ = false;
  std::string bad_;
  uint32_t total_;
  std::vector<std::thread> workers_;  // touched only by the downloading thread
};

// With a key, the reply header (and, when it says ok, the chunk key) come
// as the one frame of the transfer's encrypted stream. Fills hb (and
// *chunk_key); false with *why (and *io when the socket failed).
bool read_sealed_header(int fd, StreamOpener &opener, const IoLimits &lim, uint8_t *hb,
                        std::optional<ChunkKey> *chunk_key, Io *io, int *err, std::string *why) {
  uint8_t lb[4];
  size_t got = 0;
  *io = read_all(fd, lb, sizeof lb, lim, &got, err);
  if (*io != Io::ok) return false;
  const uint32_t len = get32(lb);
  const size_t most = kStateReplySize + kStateChunkKeySize + StreamSealer::kTagBytes;
  if (len != kStateReplySize + StreamSealer::kTagBytes && len != most) {
    *why = "a header frame of " + std::to_string(len) + " bytes in the donor's encrypted stream (expected " +
           std::to_string(kStateReplySize + StreamSealer::kTagBytes) + " or " + std::to_string(most) + ")";
    return false;
  }
  uint8_t cipher[most];
  *io = read_all(fd, cipher, len, lim, &got, err);
  if (*io != Io::ok) return false;
  Bytes plain;
  bool final = false;
  if (!opener.open(cipher, len, &plain, &final)) {
    *why = "the donor's encrypted stream does not open (altered, reordered or not of this stream)";
    return false;
  }
  if (!final) {
    *why = "the donor's encrypted stream did not end where its reply header did";
    return false;
  }
  std::copy(plain.begin(), plain.begin() + long(kStateReplySize), hb);
  if (plain.size() > kStateReplySize) chunk_key->emplace(plain.data() + kStateReplySize);
  wipe(plain.data(), plain.size());
  return true;
}

}  // namespace

std::string io_failure(Io r, int err, const std::string &peer, const std::string &during) {
  switch (r) {
    case Io::timeout:
      return "timed out " + during;
    case Io::cancelled:
      return "cancelled " + during;
    case Io::closed:
      return "connection closed by " + peer + " " + during;
    case Io::reset:
      return "connection error " + during + ": " + errno_text(err);
    case Io::ok:
      break;
  }
  return "ok";
}

bool prove_key(int fd, const StateKeys &keys, const uint8_t *req, const IoLimits &lim,
               std::unique_ptr<StreamOpener> *stream, std::string *why, const IoText &io_text, KeyRefusal *refusal,
               std::pair<StateKeys::Nonce, StateKeys::Nonce> *nonces) {
  uint8_t ch[kStateChallengeSize];
  size_t got = 0;
  int err = 0;
  Io r = read_all(fd, ch, sizeof ch, lim, &got, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "waiting for the donor's challenge");
    return false;
  }
  if (get32(ch) == kStateReplyMagic) {  // a plain refusal: its status follows
    const uint16_t status = get16(ch + 6);
    if (status == uint16_t(StateStatus::bad_request)) *refusal = KeyRefusal::swarm_has_none;
    *why = status == uint16_t(StateStatus::bad_request)
               ? "donor refused the keyed request (its swarm has no key, or another wire version)"
               : std::string("donor refused: ") +
                     (status <= uint16_t(StateStatus::not_key_holder) ? to_string(StateStatus(status)) : "unknown status");
    return false;
  }
  if (get32(ch) != kStateChallengeMagic) {
    *why = "not a challenge: bad magic " + hex(get32(ch)) + " (garbage from the donor?)";
    return false;
  }
  StateKeys::Nonce server, client = StateKeys::fresh_nonce();
  std::copy(ch + 4, ch + 4 + StateKeys::kNonceBytes, server.begin());
  const auto proof = keys.proof(StateKeys::kClient, req, kStateRequestSize, server, client);
  uint8_t answer[kStateProofSize];
  std::copy(client.begin(), client.end(), answer);
  std::copy(proof.begin(), proof.end(), answer + StateKeys::kNonceBytes);
  iovec iov{answer, sizeof answer};
  r = write_all(fd, &iov, 1, lim, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "while sending this peer's proof of the swarm key");
    return false;
  }
  uint8_t acc[kStateAcceptSize];
  r = read_all(fd, acc, 4, lim, &got, &err);
  if (r == Io::ok && get32(acc) == kStateReplyMagic) {
    r = read_all(fd, acc + 4, kStateReplySize - 4, lim, &got, &err);
    const uint16_t status = get16(acc + 6);
    if (r == Io::ok && status == uint16_t(StateStatus::not_key_holder)) *refusal = KeyRefusal::other_key;
    *why = r == Io::ok && status == uint16_t(StateStatus::not_key_holder)
               ? "donor refused this peer's proof: the two hold different swarm keys"
               : std::string("donor refused the request after the challenge: ") +
                     (r == Io::ok && status <= uint16_t(StateStatus::not_key_holder) ? to_string(StateStatus(status))
                                                                                     : "no reason given");
    return false;
  }
  if (r == Io::ok && get32(acc) != kStateAcceptMagic) {
    *why = "not an accept message: bad magic " + hex(get32(acc));
    return false;
  }
  if (r == Io::ok) r = read_all(fd, acc + 4, kStateAcceptSize - 4, lim, &got, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "waiting for the donor's proof of the swarm key");
    return false;
  }
  if (!keys.verify(StateKeys::kServer, req, kStateRequestSize, server, client, acc + 4 + StreamSealer::kHeaderBytes)) {
    *why = "the donor does not hold this swarm's key (its proof does not match): not trusted";
    return false;
  }
  auto opener = std::make_unique<StreamOpener>(keys.stream_key(server, client), acc + 4);
  if (!opener->ok()) {
    *why = "the donor's stream header does not open";
    return false;
  }
  *stream = std::move(opener);
  if (nonces) *nonces = {server, client};
  return true;
}


std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch, Clock::time_point deadline,
                                         std::chrono::milliseconds stall, const std::atomic<bool> *cancel,
                                         std::string *why, uint16_t flags, const StateKeys *keys, KeyRefusal *refusal,
                                         std::atomic<int64_t> *claim, int64_t claimant) {
  if (keys) flags |= kStateFlagKeyed;
  KeyRefusal ignored = KeyRefusal::none;
  if (refusal == nullptr) refusal = &ignored;
  IoLimits lim{stall, deadline, cancel, -1};
  Fd fd;
  std::function<std::string(Io, int, const std::string &)> io_text = [&](Io r, int err,
                                                                          const std::string &during) -> std::string {
    if (r != Io::timeout) return io_failure(r, err, "donor", during);
    return Clock::now() >= deadline ? "overall timeout " + during
                                    : "stalled: nothing for " + std::to_string(stall.count()) + " ms " + during;
  };

  if (!connect_to(d.host, d.port, lim, &fd, why)) return std::nullopt;

  uint8_t req[kStateRequestSize];
  encode_request(req, run, min_epoch, flags);
  iovec iov{req, sizeof req};
  int err = 0;
  Io r = write_all(fd.get(), &iov, 1, lim, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "while sending the request");
    return std::nullopt;
  }

  std::unique_ptr<StreamOpener> stream;
  if (keys && !prove_key(fd.get(), *keys, req, lim, &stream, why, io_text, refusal)) return std::nullopt;
  uint8_t hb[kStateReplySize];
  size_t got = 0;
  std::optional<ChunkKey> chunk_key;
  std::string defect;
  if (stream) {
    if (!read_sealed_header(fd.get(), *stream, lim, hb, &chunk_key, &r, &err, &defect) && defect.empty())
      defect = io_text(r, err, "in the donor's encrypted reply header");
  } else {
    r = read_all(fd.get(), hb, sizeof hb, lim, &got, &err);
    if (r != Io::ok)
      defect = io_text(r, err,
                       got > 0 ? "after " + std::to_string(got) + " of " + std::to_string(kStateReplySize) +
                                     " header bytes (truncated header)"
                               : std::string("in the reply header"));
  }
  if (!defect.empty()) {
    *why = defect;
    return std::nullopt;
  }
  if (get32(hb) != kStateReplyMagic) {
    *why = "not a state reply: bad magic " + hex(get32(hb)) + " (garbage from the donor?)";
    return std::nullopt;
  }
  if (get16(hb + 4) != kStateWireVersion) {
    *why = "donor speaks wire version " + std::to_string(get16(hb + 4)) + ", this peer " +
           std::to_string(kStateWireVersion);
    return std::nullopt;
  }
  if (get32(hb + 32) != crc(hb, 32)) {
    *why = "reply header checksum mismatch";
    return std::nullopt;
  }
  ReplyHeader h;
  uint16_t status = get16(hb + 6);
  h.epoch = int64_t(get64(hb + 8));
  h.total = get64(hb + 16);
  h.chunk = get32(hb + 24);
  h.total_crc = get32(hb + 28);
  if (status > uint16_t(StateStatus::not_key_holder)) {
    *why = "unknown reply status " + std::to_string(status);
    return std::nullopt;
  }
  h.status = StateStatus(status);
  if (h.status == StateStatus::not_key_holder) *refusal = KeyRefusal::lacks_key;
  if (h.status != StateStatus::ok) {
    *why = to_string(h.status);
    if (h.status == StateStatus::behind)
      *why += ": has epoch " + std::to_string(h.epoch) + ", need >= " + std::to_string(min_epoch);
    return std::nullopt;
  }
  if (stream && !chunk_key) {
    *why = "the donor's reply says ok but brought no chunk key";
    return std::nullopt;
  }
  if (h.epoch < min_epoch) {
    *why = "offers epoch " + std::to_string(h.epoch) + ", need >= " + std::to_string(min_epoch) + " (donor is behind)";
    return std::nullopt;
  }
  if ((flags & kStateFlagModel) && h.total > kMaxModelBytes) {
    *why = "a model record of " + std::to_string(h.total) + " bytes (limit " + std::to_string(kMaxModelBytes) + ")";
    return std::nullopt;
  }
  if (h.total > kMaxStateBytes) {
    *why = "absurd total length " + std::to_string(h.total) + " bytes (limit " + std::to_string(kMaxStateBytes) + ")";
    return std::nullopt;
  }
  if (h.total > 0 && (h.chunk == 0 || h.chunk > kMaxStateChunk)) {
    *why = "bad chunk size " + std::to_string(h.chunk) + " (must be 1.." + std::to_string(kMaxStateChunk) + ")";
    return std::nullopt;
  }
  int64_t free_claim = -1;
  if (claim && !claim->compare_exchange_strong(free_claim, claimant)) {
    *why = kLostRace;
    return std::nullopt;
  }

  DownloadedState out;
  out.donor = d.peer_id;
  out.epoch = h.epoch;
  // Reserve address space only; pages are touched as bytes arrive,
  // so a donor that lies about the length costs only what it really sends.
  try {
    out.bytes.reserve(size_t(h.total));
  } catch (const std::exception &) {
    *why = "cannot allocate " + std::to_string(h.total) + " bytes for the state";
    return std::nullopt;
  }
  loom_plugin_common::advise_huge(out.bytes.data(), size_t(h.total));
  // Declared after out: destroyed (its worker joined) before out's bytes go.
  Verifier verifier(out.bytes.data(), chunk_key ? &*chunk_key : nullptr, hb);
  const size_t chunk_header = chunk_key ? kStateSealedChunkHeaderSize : kStateChunkHeaderSize;
  uint64_t off = 0;
  for (uint64_t index = 0; off < h.total; ++index) {
    if (verifier.failed(why)) return std::nullopt;
    uint8_t ch[kStateSealedChunkHeaderSize];
    r = read_all(fd.get(), ch, chunk_header, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    const uint32_t n = get32(ch);
    const uint64_t expect = std::min<uint64_t>(h.chunk, h.total - off);
    if (n != expect) {
      *why =
          "chunk " + std::to_string(index) + ": length " + std::to_string(n) + ", expected " + std::to_string(expect);
      return std::nullopt;
    }
    // Within the reserved capacity: the buffer never moves under the verifier.
    out.bytes.resize(size_t(off + n));
    r = read_all(fd.get(), out.bytes.data() + off, n, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off + got) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    verifier.push(index, off, n, ch + 4);
    off += n;
  }
  uint32_t total_crc = 0;
  if (!verifier.finish(&total_crc, why)) return std::nullopt;
  // With a key every chunk opened, each in its place: that says more than a CRC.
  if (!chunk_key && total_crc != h.total_crc) {
    *why = "whole-state CRC mismatch (computed " + hex(total_crc) + ", sent " + hex(h.total_crc) + ")";
    return std::nullopt;
  }
  return out;
}

using wire::Clock;
using wire::emit;

std::optional<Bytes> fetch_model(const std::string &host, uint16_t port, uint64_t run,
                                 std::chrono::milliseconds timeout, std::string *why,
                                 const std::optional<loom_key::SwarmKey> &key, KeyRefusal *refusal) {
  const Donor d{0, host, port, 0};
  std::unique_ptr<StateKeys> keys;
  if (key) keys = std::make_unique<StateKeys>(*key);
  if (refusal) *refusal = KeyRefusal::none;
  auto got =
      try_donor(d, run, 0, Clock::now() + timeout, timeout, nullptr, why, kStateFlagModel, keys.get(), refusal);
  if (!got) return std::nullopt;
  return std::move(got->bytes);
}

}  // namespace loom_collab
