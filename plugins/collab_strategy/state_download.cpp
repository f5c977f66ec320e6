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
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

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

// One attempt against one donor. Returns the state or sets *why.
// flags: 0 for the state, kStateFlagModel for the model record.
std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch, Clock::time_point deadline,
                                         milliseconds stall, const std::atomic<bool> *cancel, std::string *why,
                                         uint16_t flags = 0) {
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
  auto io_text = [&](Io r, int err, const std::string &during) -> std::string {
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

  uint8_t hb[kStateReplySize];
  size_t got = 0;
  r = read_all(fd.get(), hb, sizeof hb, lim, &got, &err);
  if (r != Io::ok) {
    std::string during = "in the reply header";
    if (got > 0)
      during = "after " + std::to_string(got) + " of " + std::to_string(kStateReplySize) +
               " header bytes (truncated header)";
    *why = io_text(r, err, during);
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
  if (status > uint16_t(StateStatus::bad_request)) {
    *why = "unknown reply status " + std::to_string(status);
    return std::nullopt;
  }
  h.status = StateStatus(status);
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
    r = read_all(fd.get(), ch, sizeof ch, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off) + " of " + std::to_string(h.total) + " bytes");
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
    r = read_all(fd.get(), out.bytes.data() + off, n, lim, &got, &err);
    if (r != Io::ok) {
      *why = io_text(r, err, "after " + std::to_string(off + got) + " of " + std::to_string(h.total) + " bytes");
      return std::nullopt;
    }
    verifier.push(index, off, n, want_crc);
    off += n;
  }
  uint32_t total_crc = 0;
  if (!verifier.finish(&total_crc, why)) return std::nullopt;
  if (total_crc != h.total_crc) {
    *why = "whole-state CRC mismatch (computed " + hex(total_crc) + ", sent " + hex(h.total_crc) + ")";
    return std::nullopt;
  }
  return out;
}

}  // namespace

using wire::Clock;
using wire::emit;

std::optional<Bytes> fetch_model(const std::string &host, uint16_t port, uint64_t run,
                                 std::chrono::milliseconds timeout, std::string *why) {
  const Donor d{0, host, port, 0};
  auto got = try_donor(d, run, 0, Clock::now() + timeout, timeout, nullptr, why, kStateFlagModel);
  if (!got) return std::nullopt;
  return std::move(got->bytes);
}

std::optional<DownloadedState> download_state(const std::vector<Donor> &donors, uint64_t run, int64_t min_epoch,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::milliseconds stall_timeout, const LogFn &log,
                                              std::string *why, const std::atomic<bool> *cancel) {
  const auto t0 = Clock::now();
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
    auto got = try_donor(d, run, min_epoch, deadline, stall_timeout, cancel, &reason);
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
