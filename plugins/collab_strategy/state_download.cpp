// download_state: a joiner fetches the whole state from donors, checking
// each chunk's CRC on worker threads while the next chunks arrive. The wire
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

#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"

namespace loom_collab {

namespace {

using namespace wire;

// Checks chunk CRCs on worker threads while the next chunks arrive, so a
// joiner's download is bound by the wire or by CRC speed (zlib's crc32_z does
// about 1.3 GB/s on one core here), not by their sum. Several workers keep
// up with links faster than one core's CRC; results are combined in chunk
// order into the whole-state CRC.
class Verifier {
 public:
  explicit Verifier(const uint8_t *base)
      : base_(base),
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
  void push(uint64_t index, uint64_t off, uint32_t n, uint32_t want) {
    {
      std::lock_guard<std::mutex> g(m_);
      queue_.push_back({index, off, n, want});
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
    uint32_t n, want;
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
    uint32_t c = crc(base_ + it.off, it.n);
    g.lock();
    if (c != it.want) {
      if (bad_.empty())
        bad_ =
            "chunk " + std::to_string(it.index) + " CRC mismatch (computed " + hex(c) + ", sent " + hex(it.want) + ")";
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
  const uint8_t *base_;
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

// Asks for transparent huge pages for a big receive buffer: a fresh 4 KiB
// page per fault made page faults a large share of a download's time.
void advise_huge_pages(const uint8_t *p, size_t n) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (n < 2 * kHuge) return;
  uintptr_t begin = (uintptr_t(p) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t end = (uintptr_t(p) + n) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
}

// Reads a reply: as it is, or with a swarm key from the frames of an
// encrypted stream (read_all's contract either way).
class Receiver {
 public:
  Receiver(int fd, const IoLimits &lim) : fd_(fd), lim_(lim) {}
  void keyed(std::unique_ptr<StreamOpener> opener) { opener_ = std::move(opener); }
  Io read(uint8_t *buf, size_t n, size_t *got, int *err) {
    if (!opener_) return read_all(fd_, buf, n, lim_, got, err);
    *got = 0;
    while (*got < n) {
      if (pos_ == plain_.size()) {
        Io r = next_frame(err);
        if (r != Io::ok) return r;
        continue;
      }
      const size_t k = std::min(n - *got, plain_.size() - pos_);
      std::copy(plain_.begin() + long(pos_), plain_.begin() + long(pos_ + k), buf + *got);
      pos_ += k;
      *got += k;
    }
    return Io::ok;
  }
  // With a key: the stream's last frame must follow what was read, or the
  // stream was cut (or made longer). *why says which.
  bool finished(std::string *why) {
    if (!opener_) return true;
    int err = 0;
    while (!final_ && pos_ == plain_.size()) {
      if (next_frame(&err) != Io::ok) break;
    }
    if (final_ && pos_ == plain_.size()) return true;
    *why = defect_.empty() ? "the donor's encrypted stream did not end where its reply did" : defect_;
    return false;
  }
  const std::string &defect() const { return defect_; }

 private:
  Io next_frame(int *err) {
    if (final_) {
      defect_ = "the donor's encrypted stream ended early";
      return Io::closed;
    }
    uint8_t lb[4];
    size_t got = 0;
    Io r = read_all(fd_, lb, sizeof lb, lim_, &got, err);
    if (r != Io::ok) return r;
    const uint32_t len = get32(lb);
    if (len < StreamSealer::kTagBytes || len > StreamSealer::kMaxFramePlain + StreamSealer::kTagBytes) {
      defect_ = "a frame of " + std::to_string(len) + " bytes in the donor's encrypted stream";
      return Io::closed;
    }
    cipher_.resize(len);
    r = read_all(fd_, cipher_.data(), len, lim_, &got, err);
    if (r != Io::ok) return r;
    if (!opener_->open(cipher_.data(), len, &plain_, &final_)) {
      defect_ = "a frame of the donor's encrypted stream does not open (altered, reordered or not of this stream)";
      return Io::closed;
    }
    pos_ = 0;
    return Io::ok;
  }
  int fd_;
  IoLimits lim_;
  std::unique_ptr<StreamOpener> opener_;
  Bytes cipher_, plain_;
  size_t pos_ = 0;
  bool final_ = false;
  std::string defect_;
};

// With a key, after the request: the challenge, this peer's proof, the
// donor's proof and the stream's header. False with *why.
bool prove_key(int fd, const StateKeys &keys, const uint8_t *req, const IoLimits &lim, Receiver *in, std::string *why,
               const std::function<std::string(Io, int, const std::string &)> &io_text, KeyRefusal *refusal) {
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
  in->keyed(std::move(opener));
  return true;
}

// One attempt against one donor. Returns the state or sets *why.
// flags: 0 for the state, kStateFlagModel for the model record.
std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch, Clock::time_point deadline,
                                         milliseconds stall, const std::atomic<bool> *cancel, std::string *why,
                                         uint16_t flags = 0, const StateKeys *keys = nullptr,
                                         KeyRefusal *refusal = nullptr) {
  if (keys) flags |= kStateFlagKeyed;
  KeyRefusal ignored = KeyRefusal::none;
  if (refusal == nullptr) refusal = &ignored;
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (!resolve(d.host, d.port, false, std::min(left, stall), &addr, &len, why)) return std::nullopt;
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    *why = "socket: " + errno_text(errno);
    return std::nullopt;
  }
  set_int_opt(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
  IoLimits lim{stall, deadline, cancel, -1};
  std::function<std::string(Io, int, const std::string &)> io_text = [&](Io r, int err,
                                                                          const std::string &during) -> std::string {
    switch (r) {
      case Io::timeout:
        return Clock::now() >= deadline ? "overall timeout " + during
                                        : "stalled: nothing for " + std::to_string(stall.count()) + " ms " + during;
      case Io::cancelled:
        return "cancelled " + during;
      case Io::closed:
        return "connection closed by donor " + during;
      case Io::reset:
        return "connection error " + during + ": " + errno_text(err);
      case Io::ok:
        break;
    }
    return "ok";
  };

  // Connect: non-blocking, bounded by the stall timeout.
  if (::connect(fd.get(), reinterpret_cast<sockaddr *>(&addr), len) != 0) {
    if (errno != EINPROGRESS) {
      *why = "cannot connect: " + errno_text(errno);
      return std::nullopt;
    }
    Io r = wait_ready(fd.get(), POLLOUT, lim, Clock::now());
    if (r != Io::ok) {
      *why = io_text(r, 0, "while connecting");
      return std::nullopt;
    }
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
      *why = "cannot connect: " + errno_text(err);
      return std::nullopt;
    }
  }

  uint8_t req[kStateRequestSize];
  encode_request(req, run, min_epoch, flags);
  iovec iov{req, sizeof req};
  int err = 0;
  Io r = write_all(fd.get(), &iov, 1, lim, &err);
  if (r != Io::ok) {
    *why = io_text(r, err, "while sending the request");
    return std::nullopt;
  }

  Receiver in(fd.get(), lim);
  if (keys && !prove_key(fd.get(), *keys, req, lim, &in, why, io_text, refusal)) return std::nullopt;
  uint8_t hb[kStateReplySize];
  size_t got = 0;
  r = in.read(hb, sizeof hb, &got, &err);
  if (r != Io::ok) {
    std::string during = "in the reply header";
    if (got > 0)
      during = "after " + std::to_string(got) + " of " + std::to_string(kStateReplySize) +
               " header bytes (truncated header)";
    *why = !in.defect().empty() ? in.defect() : io_text(r, err, during);
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
  advise_huge_pages(out.bytes.data(), size_t(h.total));
  // Declared after out: destroyed (its worker joined) before out's bytes go.
  Verifier verifier(out.bytes.data());
  uint64_t off = 0;
  for (uint64_t index = 0; off < h.total; ++index) {
    if (verifier.failed(why)) return std::nullopt;
    uint8_t ch[kStateChunkHeaderSize];
    r = in.read(ch, sizeof ch, &got, &err);
    if (r != Io::ok) {
      *why = !in.defect().empty() ? in.defect()
                                  : io_text(r, err, "after " + std::to_string(off) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    const uint32_t n = get32(ch), want_crc = get32(ch + 4);
    const uint64_t expect = std::min<uint64_t>(h.chunk, h.total - off);
    if (n != expect) {
      *why =
          "chunk " + std::to_string(index) + ": length " + std::to_string(n) + ", expected " + std::to_string(expect);
      return std::nullopt;
    }
    // Within the reserved capacity: the buffer never moves under the verifier.
    out.bytes.resize(size_t(off + n));
    r = in.read(out.bytes.data() + off, n, &got, &err);
    if (r != Io::ok) {
      *why = !in.defect().empty()
                 ? in.defect()
                 : io_text(r, err, "after " + std::to_string(off + got) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    // Under a key every frame is authenticated, in order, up to the final
    // one: the CRCs could catch nothing more, and computing them would cost
    // a core's worth of the time the decryption needs.
    if (!keys) verifier.push(index, off, n, want_crc);
    off += n;
  }
  uint32_t total_crc = 0;
  if (!verifier.finish(&total_crc, why)) return std::nullopt;
  if (!in.finished(why)) return std::nullopt;
  if (!keys && total_crc != h.total_crc) {
    *why = "whole-state CRC mismatch (computed " + hex(total_crc) + ", sent " + hex(h.total_crc) + ")";
    return std::nullopt;
  }
  return out;
}

}  // namespace

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

std::optional<DownloadedState> download_state(const std::vector<Donor> &donors, uint64_t run, int64_t min_epoch,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::milliseconds stall_timeout, const LogFn &log,
                                              std::string *why, const std::atomic<bool> *cancel,
                                              const std::optional<loom_key::SwarmKey> &key) {
  const auto t0 = Clock::now();
  std::unique_ptr<StateKeys> keys;
  if (key) keys = std::make_unique<StateKeys>(*key);
  const auto deadline = t0 + timeout;
  std::string summary;
  auto note = [&](const std::string &s) { summary += (summary.empty() ? "" : "; ") + s; };
  if (donors.empty()) note("no donors");
  for (size_t i = 0; i < donors.size(); ++i) {
    const Donor &d = donors[i];
    const std::string name = "donor " + std::to_string(d.peer_id) + " (" + d.host + ":" + std::to_string(d.port) + ")";
    if (cancel && cancel->load()) {
      note("cancelled before " + std::to_string(donors.size() - i) + " donor(s) were tried");
      break;
    }
    if (Clock::now() >= deadline) {
      note("timeout (" + std::to_string(timeout.count()) + " ms) before " + std::to_string(donors.size() - i) +
           " donor(s) were tried");
      break;
    }
    std::string reason;
    auto t = Clock::now();
    auto got = try_donor(d, run, min_epoch, deadline, stall_timeout, cancel, &reason, 0, keys.get());
    if (got) {
      double s = std::chrono::duration<double>(Clock::now() - t).count();
      emit(log, Level::info,
           "downloaded state of epoch " + std::to_string(got->epoch) + " (" + std::to_string(got->bytes.size()) +
               " bytes) from " + name + " in " + std::to_string(int64_t(s * 1000)) + " ms");
      if (why) why->clear();
      return got;
    }
    emit(log, Level::warn, "state download from " + name + " failed: " + reason);
    note(name + ": " + reason);
  }
  if (why) *why = summary;
  return std::nullopt;
}

}  // namespace loom_collab
