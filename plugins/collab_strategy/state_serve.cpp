// SPDX-License-Identifier: Apache-2.0
// A state transfer's own thread: waits for a fresh enough snapshot (or takes
// the model record), then sends it; and how a snapshot is made ready to send.
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "state_server_impl.h"
#include "thread_name.h"

namespace loom_collab {

using namespace wire;
using namespace server_detail;

namespace {

// How many chunks a state of n bytes is sent in.
size_t chunk_count(size_t n) {
  const size_t chunk = state_chunk_bytes(n);
  return (n + chunk - 1) / chunk;
}

}  // namespace

bool Snapshot::ensure_ready(const std::function<bool()> &stop) {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    if (state_ == kDone) return true;
    if (stop()) return false;
    if (state_ == kBusy) {  // someone else is at it: wait for them
      cv_.wait_for(g, kTick);
      continue;
    }
    state_ = kBusy;
    g.unlock();
    const bool complete = keyed ? seal(stop) : checksum(stop);
    g.lock();
    state_ = complete ? kDone : kIdle;
    cv_.notify_all();
  }
}

ReplyHeader Snapshot::ok_reply(uint32_t total_crc) const {
  ReplyHeader h;
  h.epoch = epoch;
  h.total = bytes.size();
  h.chunk = state_chunk_bytes(bytes.size());
  h.total_crc = total_crc;
  return h;
}

bool Snapshot::checksum(const std::function<bool()> &stop) {
  std::vector<uint32_t> crcs;
  crcs.reserve(chunk_count(bytes.size()));
  uint32_t total = uint32_t(crc32_z(0, nullptr, 0));
  const size_t chunk = state_chunk_bytes(bytes.size());
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    if (stop()) return false;
    const size_t n = std::min<size_t>(chunk, bytes.size() - off);
    const uint32_t c = crc(bytes.data() + off, n);
    crcs.push_back(c);
    total = uint32_t(crc32_combine(total, c, z_off_t(n)));
  }
  chunk_crcs = std::move(crcs);
  encode_reply(header, ok_reply(total));
  return true;
}

bool Snapshot::seal(const std::function<bool()> &stop) {
  if (!key) {  // the first try: later ones resume at tags.size()
    // The CRCs of the bytes first: the header (which the chunks are bound
    // to) carries the whole state's, as without a key.
    if (!checksum(stop)) return false;
    key.emplace(ChunkKey::fresh());
    tags.reserve(chunk_count(bytes.size()));
  }
  const size_t chunk = state_chunk_bytes(bytes.size());
  for (size_t off = tags.size() * chunk; off < bytes.size(); off += chunk) {
    if (stop()) return false;
    const size_t n = std::min<size_t>(chunk, bytes.size() - off);
    tags.push_back(key->seal(tags.size(), bytes.data() + off, n, header, sizeof header));
  }
  return true;
}

// With a key: the accept message (magic, the stream's header, the server's
// proof), then the stream. Null (and *ok false) when it could not be sent.
std::unique_ptr<StreamSealer> StateServer::Impl::accept_keyed(Transfer &t, const IoLimits &lim, int *err, bool *ok) {
  uint8_t b[kStateAcceptSize];
  put32(b, kStateAcceptMagic);
  auto sealer = std::make_unique<StreamSealer>(keys->stream_key(t.server_nonce, t.client_nonce), b + 4);
  const auto proof = keys->proof(StateKeys::kServer, t.request, kStateRequestSize, t.server_nonce, t.client_nonce);
  std::copy(proof.begin(), proof.end(), b + 4 + StreamSealer::kHeaderBytes);
  iovec iov{b, sizeof b};
  *ok = write_all(t.fd.get(), &iov, 1, lim, err) == Io::ok;
  return sealer;
}

// On the transfer's own thread: wait for a fresh enough snapshot, then send it.
void StateServer::Impl::serve(Transfer &t) {
  name_this_thread("collab-transfer");
  const int fd = t.fd.get();
  const std::string &peer = t.peer;
  const auto asked = Clock::now();
  bool asked_training = false;  // no snapshot fresh enough was ready: the training thread was asked for one
  bool oob_refused = false;     // an oob part that was not one (logged): answered bad_request
  std::shared_ptr<Snapshot> snap;
  int64_t range_epoch = 0;
  uint32_t first = 0, count = 0;
  if (t.range) unpack_range(t.min_epoch, &range_epoch, &first, &count);
  if (t.model) {
    std::lock_guard<std::mutex> g(m);
    snap = model;
    t.min_epoch = 0;
  } else if (t.progress) {
    snap = progress_snapshot(t.min_epoch);  // never null: an empty table at worst
    t.min_epoch = 0;
  } else if (t.oob) {
    std::string why;
    snap = oob_snapshot(t, &why);  // held while the group's members arrive
    t.min_epoch = 0;
    if (!snap && !stopping && !t.cancel) {
      emit(log, Level::warn, "state server: refused " + peer + "'s oob request (a part or a grant ask): " + why);
      oob_refused = true;
    }
  } else if (t.range) {
    // Part of a snapshot the client has begun elsewhere: this one or none.
    std::lock_guard<std::mutex> g(m);
    snap = snapshot;
    t.min_epoch = range_epoch;
  } else {
    std::unique_lock<std::mutex> g(m);
    auto fresh = [&] { return snapshot && snapshot->epoch >= t.min_epoch; };
    asked_training = !fresh();
    if (asked_training) {
      // Ask the training thread for a snapshot; it publishes at its next safe point.
      wanted = true;
      published.wait_for(g, milliseconds(wait_ms.load()),
                         [&] { return fresh() || stopping.load() || t.cancel.load(); });
    }
    snap = snapshot;
  }
  t.end = End::cancelled;
  if (stopping || t.cancel) return;
  int err = 0;
  IoLimits lim{limits.idle_timeout, Clock::time_point::max(), &t.cancel, stop_read.get(), &t.sent};
  std::unique_ptr<StreamSealer> sealer;
  if (t.keyed) {
    bool ok = false;
    sealer = accept_keyed(t, lim, &err, &ok);
    if (!ok) {
      t.end = End::went_away;
      return;
    }
  }
  ReplyHeader h;
  // With a key, the reply header (and the chunk key) go as the stream's one frame.
  auto send_header = [&](const uint8_t *hb, const uint8_t *chunk_key) {
    Bytes frame;
    const uint8_t *p = hb;
    size_t len = kStateReplySize;
    uint8_t plain[kStateReplySize + kStateChunkKeySize];
    if (sealer) {
      std::copy(hb, hb + kStateReplySize, plain);
      if (chunk_key) std::copy(chunk_key, chunk_key + kStateChunkKeySize, plain + kStateReplySize);
      sealer->frame(plain, kStateReplySize + (chunk_key ? kStateChunkKeySize : 0), true, &frame);
      wipe(plain, sizeof plain);
      p = frame.data();
      len = frame.size();
    }
    iovec iov{const_cast<uint8_t *>(p), len};
    return write_all(fd, &iov, 1, lim, &err);
  };
  if (!snap || snap->epoch < t.min_epoch || (t.range && snap->epoch != range_epoch)) {
    h.status = oob_refused ? StateStatus::bad_request : snap ? StateStatus::behind : StateStatus::not_ready;
    h.epoch = snap ? snap->epoch : 0;
    if (!t.oob)
      emit(log, t.model ? Level::debug : Level::info,
         "state server: " + peer + " asked for " +
             (t.model ? std::string("the swarm's model: this peer is not sure of it yet")
                      : (t.range ? "chunks of epoch " : "epoch >= ") + std::to_string(t.min_epoch) + ": " +
                            (snap ? "have " + std::to_string(snap->epoch) : std::string("nothing published"))));
    uint8_t b[kStateReplySize];
    encode_reply(b, h);
    lim.progress = nullptr;  // a refusal sends none of the state
    t.end = send_header(b, nullptr) == Io::ok ? End::no_data : End::went_away;
    return;
  }

  // A model record is no state transfer: it does not make this peer a busy donor.
  std::atomic<int> not_counted{0};
  std::atomic<int> &counter = t.model || t.progress || t.oob ? not_counted : active;
  counter.fetch_add(1);
  struct Done {
    std::atomic<int> &a;
    ~Done() { a.fetch_sub(1); }
  } done{counter};
  const auto got_snapshot = Clock::now();
  if (!snap->ensure_ready([&] { return stopping.load() || t.cancel.load(); })) return;
  const auto ready = Clock::now();
  if (t.keyed != snap->keyed) return;  // never: a server's snapshots and requests share its key
  const size_t chunk_header = t.keyed ? kStateSealedChunkHeaderSize : kStateChunkHeaderSize;
  const size_t total = snap->bytes.size();
  const size_t chunk = state_chunk_bytes(total);
  if (t.range && size_t(first) + count > chunk_count(total)) {
    emit(log, Level::info,
         "state server: " + peer + " asked for chunks " + std::to_string(first) + " to " +
             std::to_string(first + count - 1) + " of epoch " + std::to_string(snap->epoch) + ", which has " +
             std::to_string(chunk_count(total)));
    uint8_t b[kStateReplySize];
    h.status = StateStatus::bad_request;
    h.epoch = snap->epoch;
    encode_reply(b, h);
    lim.progress = nullptr;
    t.end = send_header(b, nullptr) == Io::ok ? End::no_data : End::went_away;
    return;
  }
  // The header and chunk headers count as sent bytes too: `total` is what a
  // complete transfer of the whole state moves, so the fraction sent is
  // exact, and a range costs its share of a request token.
  t.total = total + kStateReplySize + chunk_header * chunk_count(total);
  auto t0 = Clock::now();
  Io r = send_header(snap->header, t.keyed ? snap->key->bytes().data() : nullptr);
  // The chunks go from the shared snapshot itself, never copied (sealed
  // already, with a key).
  size_t off = t.range ? size_t(first) * chunk : 0;
  const size_t end = t.range ? std::min(total, size_t(first + count) * chunk) : total;
  for (size_t index = t.range ? first : 0; r == Io::ok && off < end; ++index) {
    if (stopping || t.cancel) return;  // a fast reader never lets poll() see the stop pipe
    const size_t n = std::min<size_t>(chunk, total - off);
    uint8_t ch[kStateSealedChunkHeaderSize];
    put32(ch, uint32_t(n));
    if (t.keyed)
      std::copy(snap->tags[index].begin(), snap->tags[index].end(), ch + 4);
    else
      put32(ch + 4, snap->chunk_crcs[index]);
    iovec iov[2] = {{ch, chunk_header}, {const_cast<uint8_t *>(snap->bytes.data() + off), n}};
    r = write_all(fd, iov, 2, lim, &err);
    if (r == Io::ok) {
      off += n;
      chunks_out.fetch_add(1);
    }
  }
  if (r != Io::ok) {
    t.end = r == Io::timeout ? End::stalled : r == Io::cancelled ? End::cancelled : End::went_away;
    if (r != Io::timeout && r != Io::cancelled && !t.range)  // a joiner drops a range it got elsewhere
      emit(log, Level::info,
           "state server: transfer of epoch " + std::to_string(snap->epoch) + " to " + peer + " ended after " +
               std::to_string(off) + " of " + std::to_string(total) + " bytes: it went away" +
               (err ? std::string(" (") + errno_text(err) + ")" : ""));
    return;
  }
  // Written is not delivered: a state smaller than the socket's send queue
  // (a few MB on loopback) is written at once. The transfer lasts until the
  // client has taken every byte, so that its time, the stall rules and this
  // donor's busy flag (kServing) follow the delivery, not the copy.
  int unsent = 0, last_unsent = -1;
  auto changed = Clock::now();
  for (auto nap = milliseconds(1); ::ioctl(fd, SIOCOUTQ, &unsent) == 0 && unsent > 0;
       nap = std::min(nap * 2, kTick)) {
    if (stopping || t.cancel) return;
    const auto now = Clock::now();
    if (unsent != last_unsent) {
      last_unsent = unsent;
      changed = now;
    } else if (now - changed >= limits.idle_timeout) {
      t.end = End::stalled;
      return;
    }
    std::this_thread::sleep_for(nap);
  }
  t.end = End::sent;
  if (t.progress || t.oob) {
    (t.oob ? oob_served : progress_served).fetch_add(1);
    return;  // a few times a second from every peer: not logged
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  emit(log, t.model || t.range ? Level::debug : Level::info,
       "state server: sent " +
           (t.model   ? std::string("the model record")
            : t.range ? "chunks " + std::to_string(first) + "-" + std::to_string(first + count - 1) + " of epoch " +
                            std::to_string(snap->epoch)
                      : "epoch " + std::to_string(snap->epoch)) +
           " (" + std::to_string(end - (t.range ? size_t(first) * chunk : 0)) + " bytes) to " + peer + " in " +
           std::to_string(int64_t(s * 1000)) +
           " ms, " +
           (asked_training ? "after waiting " +
                                 std::to_string(std::chrono::duration_cast<milliseconds>(got_snapshot - asked).count()) +
                                 " ms for the training thread's snapshot"
                           : std::string("from a snapshot ready when it asked")) +
           " (" + std::to_string(std::chrono::duration_cast<milliseconds>(ready - got_snapshot).count()) + " ms for its " +
           (t.keyed ? "seal" : "checksums") + ")");
}

}  // namespace loom_collab
