/* SPDX-License-Identifier: Apache-2.0 */
// The state transfer's shared internals: little-endian encoding of the wire
// format (state_transfer.h describes it), file descriptors, address lookup
// with a deadline, and socket I/O bounded by stall, deadline and cancel
// limits. Used by state_server.cpp and state_download.cpp only.
#ifndef LOOM_COLLAB_STATE_WIRE_H
#define LOOM_COLLAB_STATE_WIRE_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "state_transfer.h"

namespace loom_collab::wire {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{50};  // how often waits look at stop / cancel flags

// The chunks a server sends a state of `total` bytes in: a power of two
// from 1 to 4 MiB, 12 to 24 of them from 24 to 96 MiB (fewer below, of
// 1 MiB; more above, of 4 MiB). Small states are cut
// finer, so a spread download still has chunks free for donors whose reply
// comes a second after the first's, and a slow donor's last chunk delays
// the end by little; large ones keep a helper's per-request cost (a
// connection, with a key a handshake) small next to its chunk.
constexpr uint32_t state_chunk_bytes(uint64_t total) {
  uint32_t chunk = 1u << 20;
  while (chunk < (4u << 20) && uint64_t(chunk) * 24 < total) chunk *= 2;
  return chunk;
}

// ---- little-endian encoding ----
inline void put16(uint8_t *p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t get16(const uint8_t *p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t crc(const uint8_t *p, size_t n);  // zlib's crc32_z
std::string hex(uint32_t v);               // "0x%08x"
std::string errno_text(int e);
inline void emit(const LogFn &log, Level l, const std::string &m) {
  if (log) log(l, m);
}

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd &&o) noexcept : fd_(o.release()) {}
  Fd &operator=(Fd &&o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void set_nonblocking(int fd);
void set_int_opt(int fd, int level, int opt, int v);

// Looks host up (numeric at once; a name on a helper thread we stop waiting
// for after timeout). On failure returns false with *why.
bool resolve(const std::string &host, uint16_t port, bool passive, milliseconds timeout, sockaddr_storage *out,
             socklen_t *out_len, std::string *why);
std::string address_text(const sockaddr *sa);  // "1.2.3.4:5" or "[::1]:5"

// ---- deadline-bound socket I/O ----
enum class Io { ok, closed, reset, timeout, cancelled };

// What bounds one blocking step: no progress for `stall`, the absolute
// `deadline`, a cancel flag, or a readable stop pipe (server shutdown).
// `progress`, when set, counts the bytes written (others may watch it).
struct IoLimits {
  milliseconds stall;
  Clock::time_point deadline;
  const std::atomic<bool> *cancel = nullptr;
  int stop_fd = -1;
  std::atomic<uint64_t> *progress = nullptr;
};

// Waits for `events` on fd until ready, or a limit is hit. Returns ok when
// ready. last_progress is when bytes last moved.
Io wait_ready(int fd, short events, const IoLimits &lim, Clock::time_point last_progress);
// Reads exactly n bytes. *got counts what arrived (for messages).
Io read_all(int fd, uint8_t *buf, size_t n, const IoLimits &lim, size_t *got, int *err);
// Writes the iovecs fully (MSG_NOSIGNAL: a vanished peer is an error, not SIGPIPE).
Io write_all(int fd, iovec *iov, int iovcnt, const IoLimits &lim, int *err);
// Opens a TCP connection to host:port (non-blocking, TCP_NODELAY), the
// lookup and the connect each bounded by lim's stall and deadline. False
// with *why. bind_host, when not empty, is the local address it leaves from.
bool connect_to(const std::string &host, uint16_t port, const IoLimits &lim, Fd *out, std::string *why,
                const std::string &bind_host = "");

// ---- messages ----
void encode_request(uint8_t *b, uint64_t run, int64_t min_epoch, uint16_t flags = 0);

struct ReplyHeader {
  StateStatus status = StateStatus::ok;
  int64_t epoch = 0;
  uint64_t total = 0;
  uint32_t chunk = 0;
  uint32_t total_crc = 0;
};
void encode_reply(uint8_t *b, const ReplyHeader &h);

}  // namespace loom_collab::wire

#endif
