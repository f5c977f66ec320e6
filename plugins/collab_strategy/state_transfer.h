// Training-state download between peers over TCP: a joining or lagging peer
// fetches the whole state (a snapshot's bytes) from a donor, in chunks, each
// with a CRC-32, plus a CRC-32 of the whole, and moves on to the next donor
// if one dies, stalls, sends a bad checksum or is behind min_epoch.
// state_server.cpp holds the donor's side, state_download.cpp the joiner's,
// state_wire.{h,cpp} what both share.
#ifndef LOOM_COLLAB_STATE_TRANSFER_H
#define LOOM_COLLAB_STATE_TRANSFER_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "log.h"
#include "records.h"

namespace loom_collab {

// The wire format (little-endian, fixed width), version kStateWireVersion.
// The first 8 bytes of a request and of a reply (magic, version) never change
// between versions, so either side can name a version it does not speak.
//   request (28 B): magic kStateRequestMagic u32, version u16, flags u16 (0),
//                   run hash u64, min_epoch i64, CRC-32 of the previous 24 B
//   reply   (36 B): magic kStateReplyMagic u32, version u16, status u16,
//                   epoch i64, total length u64, chunk size u32,
//                   CRC-32 of the whole state u32, CRC-32 of the previous 32 B
//   then, when status is ok, ceil(total / chunk size) chunks, each
//                   length u32 (= min(chunk size, bytes left)), CRC-32 u32, bytes.
// CRC-32 is zlib's crc32_z. The server closes the connection after a reply.
constexpr uint32_t kStateRequestMagic = 0x5154534C;  // "LSTQ"
constexpr uint32_t kStateReplyMagic = 0x5254534C;    // "LSTR"
constexpr uint16_t kStateWireVersion = 1;
constexpr size_t kStateRequestSize = 28;
constexpr size_t kStateReplySize = 36;
constexpr size_t kStateChunkHeaderSize = 8;
// Limits a client checks before it allocates anything.
constexpr uint64_t kMaxStateBytes = uint64_t(64) << 30;  // 64 GiB
constexpr uint32_t kMaxStateChunk = 64u << 20;           // 64 MiB

enum class StateStatus : uint16_t {
  ok = 0,
  not_ready = 1,    // nothing published within wait_for_publish
  other_run = 2,    // the request's run hash is not the server's
  behind = 3,       // published epoch < min_epoch (the reply carries it)
  busy = 4,         // too many transfers under way; try another donor
  bad_request = 5,  // e.g. a version the server does not speak
};
const char *to_string(StateStatus s);

// Serves the latest published snapshot from a background thread, so serving
// never runs on (or waits for) the training thread. Thread-safe.
class StateServer {
 public:
  // Binds TCP host:port (port 0: any; if port is taken, any) and starts
  // serving. Throws std::runtime_error naming the address on failure.
  StateServer(const std::string &host, uint16_t port, uint64_t run, LogFn log);
  ~StateServer();  // stops accepting, ends transfers, joins threads
  StateServer(const StateServer &) = delete;
  StateServer &operator=(const StateServer &) = delete;

  uint16_t port() const;

  // Makes (epoch, bytes) what later requests receive. Transfers under way
  // finish with the snapshot they started with.
  void publish(int64_t epoch, Bytes bytes);
  // True when a client asked for state newer than what is published (or
  // nothing is published yet) since the last publish: the training thread
  // then takes a snapshot at its next safe point and publishes it. A client
  // waits up to wait_for_publish for that before it is told "not ready".
  bool wanted() const;
  // Transfers in progress (a donor with none is idle).
  int active() const;

  void set_wait_for_publish(std::chrono::milliseconds ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Donor {
  uint64_t peer_id = 0;
  std::string host;
  uint16_t port = 0;
  int64_t epoch = 0;  // what its progress record says
};

struct DownloadedState {
  uint64_t donor = 0;
  int64_t epoch = 0;
  Bytes bytes;
};

// Tries donors in the given order until one sends a complete, checksummed
// state of epoch >= min_epoch, or timeout passes in total. A donor that is
// unreachable, refuses, stalls for stall_timeout, sends a malformed reply or a
// bad checksum, or offers an older epoch is logged (warn) and skipped.
// Returns nullopt with *why summarising every attempt. cancel (may be null)
// stops it early from another thread.
std::optional<DownloadedState> download_state(const std::vector<Donor> &donors, uint64_t run, int64_t min_epoch,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::milliseconds stall_timeout, const LogFn &log,
                                              std::string *why, const std::atomic<bool> *cancel = nullptr);

}  // namespace loom_collab

#endif
