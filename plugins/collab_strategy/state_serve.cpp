// A state transfer's own thread: waits for a fresh enough snapshot (or takes
// the model record), then sends it.
#include <algorithm>
#include <memory>

#include "state_server_impl.h"

namespace loom_collab {

using namespace wire;
using namespace server_detail;

namespace {

// Writes a reply: as it is, or with a swarm key as frames of an encrypted
// stream (at most StreamSealer::kMaxFramePlain plain bytes each, written one
// by one, so a transfer holds one frame's buffer, not a chunk's).
class Sender {
 public:
  Sender(int fd, const IoLimits &lim, std::unique_ptr<StreamSealer> sealer)
      : fd_(fd), lim_(lim), sealer_(std::move(sealer)) {}
  IoLimits &limits() { return lim_; }
  Io send(iovec *iov, int cnt, int *err) {
    if (!sealer_) return write_all(fd_, iov, cnt, lim_, err);
    for (int i = 0; i < cnt; ++i) {
      const auto *p = static_cast<const uint8_t *>(iov[i].iov_base);
      for (size_t off = 0; off < iov[i].iov_len;) {
        const size_t n = std::min(iov[i].iov_len - off, StreamSealer::kMaxFramePlain - plain_.size());
        plain_.insert(plain_.end(), p + off, p + off + n);
        off += n;
        if (plain_.size() == StreamSealer::kMaxFramePlain) {
          Io r = flush(false, err);
          if (r != Io::ok) return r;
        }
      }
    }
    return flush(false, err);
  }
  // The last frame (with a key): the receiver knows the stream was not cut.
  Io finish(int *err) { return sealer_ ? flush(true, err) : Io::ok; }

 private:
  Io flush(bool final, int *err) {
    if (plain_.empty() && !final) return Io::ok;
    frame_.clear();
    sealer_->frame(plain_.data(), plain_.size(), final, &frame_);
    plain_.clear();
    iovec v{frame_.data(), frame_.size()};
    return write_all(fd_, &v, 1, lim_, err);
  }
  int fd_;
  IoLimits lim_;
  std::unique_ptr<StreamSealer> sealer_;
  Bytes plain_, frame_;
};

}  // namespace

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
  const int fd = t.fd.get();
  const std::string &peer = t.peer;
  std::shared_ptr<Snapshot> snap;
  if (t.model) {
    std::lock_guard<std::mutex> g(m);
    snap = model;
    t.min_epoch = 0;
  } else {
    std::unique_lock<std::mutex> g(m);
    auto fresh = [&] { return snapshot && snapshot->epoch >= t.min_epoch; };
    if (!fresh()) {
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
  Sender out(fd, lim, std::move(sealer));
  ReplyHeader h;
  if (!snap || snap->epoch < t.min_epoch) {
    h.status = snap ? StateStatus::behind : StateStatus::not_ready;
    h.epoch = snap ? snap->epoch : 0;
    emit(log, t.model ? Level::debug : Level::info,
         "state server: " + peer + " asked for " +
             (t.model ? std::string("the swarm's model: this peer is not sure of it yet")
                      : "epoch >= " + std::to_string(t.min_epoch) + ": " +
                            (snap ? "have only " + std::to_string(snap->epoch) : std::string("nothing published"))));
    uint8_t b[kStateReplySize];
    encode_reply(b, h);
    iovec iov{b, sizeof b};
    out.limits().progress = nullptr;  // a refusal sends none of the state
    const bool sent = out.send(&iov, 1, &err) == Io::ok && out.finish(&err) == Io::ok;
    t.end = sent ? End::no_data : End::went_away;
    return;
  }

  // A model record is no state transfer: it does not make this peer a busy donor.
  std::atomic<int> not_counted{0};
  std::atomic<int> &counter = t.model ? not_counted : active;
  counter.fetch_add(1);
  struct Done {
    std::atomic<int> &a;
    ~Done() { a.fetch_sub(1); }
  } done{counter};
  if (!snap->ensure_sums([&] { return stopping.load() || t.cancel.load(); })) return;
  h.status = StateStatus::ok;
  h.epoch = snap->epoch;
  h.total = snap->bytes.size();
  h.chunk = kChunkSize;
  h.total_crc = snap->total_crc;
  // The header and chunk headers count as sent bytes too: `total` is what a
  // complete transfer moves, so the fraction sent is exact.
  t.total = h.total + kStateReplySize + kStateChunkHeaderSize * ((h.total + kChunkSize - 1) / kChunkSize);
  uint8_t hb[kStateReplySize];
  encode_reply(hb, h);
  auto t0 = Clock::now();
  // The header rides with the first chunk (one send); without a key, chunks
  // are sent from the shared snapshot itself, never copied.
  size_t off = 0;
  bool first = true;
  size_t index = 0;
  do {
    if (stopping || t.cancel) return;  // a fast reader never lets poll() see the stop pipe
    size_t n = std::min<size_t>(kChunkSize, snap->bytes.size() - off);
    uint8_t ch[kStateChunkHeaderSize];
    iovec iov[3];
    int cnt = 0;
    if (first) iov[cnt++] = {hb, sizeof hb};
    if (n > 0) {
      put32(ch, uint32_t(n));
      put32(ch + 4, snap->chunk_crcs[index]);
      iov[cnt++] = {ch, sizeof ch};
      iov[cnt++] = {const_cast<uint8_t *>(snap->bytes.data() + off), n};
    }
    Io r = out.send(iov, cnt, &err);
    if (r == Io::ok && off + n >= snap->bytes.size()) r = out.finish(&err);
    if (r != Io::ok) {
      t.end = r == Io::timeout ? End::stalled : r == Io::cancelled ? End::cancelled : End::went_away;
      if (r != Io::timeout && r != Io::cancelled)
        emit(log, Level::info,
             "state server: transfer of epoch " + std::to_string(snap->epoch) + " to " + peer + " ended after " +
                 std::to_string(off) + " of " + std::to_string(h.total) + " bytes: it went away" +
                 (err ? std::string(" (") + errno_text(err) + ")" : ""));
      return;
    }
    first = false;
    off += n;
    ++index;
  } while (off < snap->bytes.size());
  t.end = End::sent;
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  emit(log, t.model ? Level::debug : Level::info,
       "state server: sent " + (t.model ? std::string("the model record") : "epoch " + std::to_string(snap->epoch)) +
           " (" + std::to_string(h.total) + " bytes) to " + peer + " in " + std::to_string(int64_t(s * 1000)) +
           " ms");
}

}  // namespace loom_collab
