// SPDX-License-Identifier: Apache-2.0
// One donor's side of a joiner's download (state_donor.h): the request and
// reply header, the chunks (each checked by state_verifier.h while the next
// arrive), a whole state or a model record. The wire format is described
// in state_transfer.h.
#include <algorithm>
#include <functional>

#include "../common/huge_pages.h"
#include "state_client.h"
#include "state_verifier.h"
#include "state_donor.h"
#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"

namespace loom_collab {

namespace {

using namespace wire;

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


bool open_donor(const Donor &d, uint64_t run, int64_t min_epoch, uint16_t flags, const StateKeys *keys,
                const IoLimits &lim, const IoText &io_text, OpenReply *o, std::string *why, KeyRefusal *refusal,
                const Bytes *push) {
  Fd &fd = o->fd;
  const uint32_t most = (flags & kStateFlagOob) ? kMaxPushedOobBytes : kMaxPushedProgressBytes;
  if (push && (!(flags & (kStateFlagProgress | kStateFlagOob)) || push->empty() || push->size() > most)) {
    *why = "a pushed record of " + std::to_string(push->size()) + " bytes (1 to " + std::to_string(most) +
           ", with a progress or oob request only)";
    return false;
  }
  if (!connect_to(d.host, d.port, lim, &fd, why)) return false;

  uint8_t req[kStateRequestSize];
  if (push) flags |= kStateFlagProgressPush;
  encode_request(req, run, min_epoch, flags);
  uint8_t len[4];
  iovec iov[3] = {{req, sizeof req}, {len, sizeof len}, {nullptr, 0}};
  if (push) {
    put32(len, uint32_t(push->size()));
    iov[2] = {const_cast<uint8_t *>(push->data()), push->size()};
  }
  int err = 0;
  Io r = write_all(fd.get(), iov, push ? 3 : 1, lim, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "while sending the request");
    return false;
  }

  std::unique_ptr<StreamOpener> &stream = o->stream;
  if (keys && !prove_key(fd.get(), *keys, req, lim, &stream, why, io_text, refusal)) return false;
  uint8_t *hb = o->hb;
  size_t got = 0;
  std::optional<ChunkKey> &chunk_key = o->chunk_key;
  std::string defect;
  if (stream) {
    if (!read_sealed_header(fd.get(), *stream, lim, hb, &chunk_key, &r, &err, &defect) && defect.empty())
      defect = io_text(r, err, "in the donor's encrypted reply header");
  } else {
    r = read_all(fd.get(), hb, kStateReplySize, lim, &got, &err);
    if (r != Io::ok)
      defect = io_text(r, err,
                       got > 0 ? "after " + std::to_string(got) + " of " + std::to_string(kStateReplySize) +
                                     " header bytes (truncated header)"
                               : std::string("in the reply header"));
  }
  if (!defect.empty()) {
    *why = defect;
    return false;
  }
  if (get32(hb) != kStateReplyMagic) {
    *why = "not a state reply: bad magic " + hex(get32(hb)) + " (garbage from the donor?)";
    return false;
  }
  if (get16(hb + 4) != kStateWireVersion) {
    *why = "donor speaks wire version " + std::to_string(get16(hb + 4)) + ", this peer " +
           std::to_string(kStateWireVersion);
    return false;
  }
  if (get32(hb + 32) != crc(hb, 32)) {
    *why = "reply header checksum mismatch";
    return false;
  }
  ReplyHeader &h = o->h;
  uint16_t status = get16(hb + 6);
  h.epoch = int64_t(get64(hb + 8));
  h.total = get64(hb + 16);
  h.chunk = get32(hb + 24);
  h.total_crc = get32(hb + 28);
  if (status > uint16_t(StateStatus::not_key_holder)) {
    *why = "unknown reply status " + std::to_string(status);
    return false;
  }
  h.status = StateStatus(status);
  if (h.status == StateStatus::not_key_holder) *refusal = KeyRefusal::lacks_key;
  if (h.status != StateStatus::ok) {
    *why = to_string(h.status);
    if (h.status == StateStatus::behind)
      *why += ": has epoch " + std::to_string(h.epoch) +
              ((flags & kStateFlagRange) ? std::string(", not the one asked for")
                                         : ", need >= " + std::to_string(min_epoch));
    return false;
  }
  if (stream && !chunk_key) {
    *why = "the donor's reply says ok but brought no chunk key";
    return false;
  }
  if (h.total > kMaxStateBytes) {
    *why = "absurd total length " + std::to_string(h.total) + " bytes (limit " + std::to_string(kMaxStateBytes) + ")";
    return false;
  }
  if (h.total > 0 && (h.chunk == 0 || h.chunk > kMaxStateChunk)) {
    *why = "bad chunk size " + std::to_string(h.chunk) + " (must be 1.." + std::to_string(kMaxStateChunk) + ")";
    return false;
  }
  return true;
}

bool read_chunks(OpenReply &o, uint64_t first, uint64_t count, uint8_t *base, uint32_t *crcs, const IoLimits &lim,
                 const IoText &io_text, const std::function<bool(uint64_t)> &take, uint64_t *read, std::string *why,
                 uint32_t *total_crc, Bytes *grow) {
  const ReplyHeader &h = o.h;
  // Declared last: destroyed (its workers joined) before anything it reads goes.
  Verifier verifier(base, o.chunk_key ? &*o.chunk_key : nullptr, o.hb, crcs, first);
  const size_t chunk_header = o.chunk_key ? kStateSealedChunkHeaderSize : kStateChunkHeaderSize;
  *read = 0;
  uint64_t off = first * h.chunk;
  for (uint64_t index = first; index < first + count && off < h.total; ++index) {
    if (verifier.failed(why)) return false;
    if (take && !take(index)) break;  // the rest is another donor's
    uint8_t ch[kStateSealedChunkHeaderSize];
    size_t got = 0;
    int err = 0;
    Io r = read_all(o.fd.get(), ch, chunk_header, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off) + " of " + std::to_string(h.total) + " bytes");
      return false;
    }
    const uint32_t n = get32(ch);
    const uint64_t expect = std::min<uint64_t>(h.chunk, h.total - off);
    if (n != expect) {
      *why =
          "chunk " + std::to_string(index) + ": length " + std::to_string(n) + ", expected " + std::to_string(expect);
      return false;
    }
    if (grow) grow->resize(size_t(off + n));  // within its capacity: base stays put
    r = read_all(o.fd.get(), base + off, n, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off + got) + " of " + std::to_string(h.total) + " bytes");
      return false;
    }
    verifier.push(index, off, n, ch + 4);
    off += n;
    ++*read;
  }
  uint32_t ignored = 0;
  return verifier.finish(total_crc ? total_crc : &ignored, why);
}

std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch, Clock::time_point deadline,
                                         std::chrono::milliseconds stall, const std::atomic<bool> *cancel,
                                         std::string *why, uint16_t flags, const StateKeys *keys, KeyRefusal *refusal,
                                         std::atomic<int64_t> *claim, int64_t claimant, Stripes *stripes,
                                         const Bytes *push) {
  if (keys) flags |= kStateFlagKeyed;
  KeyRefusal ignored = KeyRefusal::none;
  if (refusal == nullptr) refusal = &ignored;
  IoLimits lim{stall, deadline, cancel, -1};
  const IoText io_text = donor_io_text(deadline, stall);
  OpenReply o;
  if (!open_donor(d, run, min_epoch, flags, keys, lim, io_text, &o, why, refusal, push)) return std::nullopt;
  const ReplyHeader &h = o.h;
  // A progress request's min_epoch names a key, an oob request's its hold.
  if (!(flags & (kStateFlagProgress | kStateFlagOob)) && h.epoch < min_epoch) {
    *why = "offers epoch " + std::to_string(h.epoch) + ", need >= " + std::to_string(min_epoch) + " (donor is behind)";
    return std::nullopt;
  }
  if ((flags & kStateFlagModel) && h.total > kMaxModelBytes) {
    *why = "a model record of " + std::to_string(h.total) + " bytes (limit " + std::to_string(kMaxModelBytes) + ")";
    return std::nullopt;
  }
  if ((flags & (kStateFlagProgress | kStateFlagOob)) && h.total > kMaxProgressBytes) {
    *why = "a progress table of " + std::to_string(h.total) + " bytes (limit " + std::to_string(kMaxProgressBytes) +
           ")";
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
  // Spread over donors when this one names its bytes' CRC (with a key,
  // servers before range requests did not) and the state fits in memory at
  // once: helpers take chunks from the end meanwhile, and this stream stops
  // where it meets theirs. Otherwise it brings the whole state itself.
  std::string unspread;  // why not (too large): the whole stream follows
  if (stripes && h.total_crc != 0 && h.chunk != 0 &&
      stripes->begin(StateIdentity{h.epoch, h.total, h.chunk, h.total_crc}, size_t(claimant), &unspread)) {
    uint64_t read = 0;
    if (!read_chunks(o, 0, stripes->chunks(), stripes->base(), stripes->crc_slots(), lim, io_text,
                     [&](uint64_t i) { return stripes->take_in_order(i); }, &read, why, nullptr, nullptr))
      return std::nullopt;
    stripes->done(0, uint32_t(read), size_t(claimant));
    return out;
  }
  // Reserve address space only: pages are touched as bytes arrive (the
  // reservation is the buffer's capacity, so it never moves under the
  // verifier), and a donor that lies about the length costs only what it
  // really sends.
  try {
    loom_plugin_common::reserve_huge(out.bytes, size_t(h.total));
  } catch (const std::exception &) {
    *why = "cannot allocate " + std::to_string(h.total) + " bytes for the state";
    return std::nullopt;
  }
  uint64_t read = 0;
  uint32_t total_crc = 0;
  if (!read_chunks(o, 0, (h.total + h.chunk - 1) / std::max<uint64_t>(1, h.chunk), out.bytes.data(), nullptr, lim,
                   io_text, nullptr, &read, why, &total_crc, &out.bytes))
    return std::nullopt;
  // With a key every chunk opened, each in its place: that says more than a CRC.
  if (!o.chunk_key && total_crc != h.total_crc) {
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
