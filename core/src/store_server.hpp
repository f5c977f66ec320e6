// SPDX-License-Identifier: Apache-2.0
// StoreServer: the rendezvous store of a `loom launch` job, served by the
// launcher itself on MASTER_ADDR:MASTER_PORT and nowhere else.
//
// Why: LibTorch 1.13's c10d::TCPStore server takes no bind address and
// listens on every interface. So `loom launch` hosts the store and tells the
// ranks (LOOM_STORE_HOSTED=1) to be clients only; each rank still talks to it
// through LibTorch's own c10d::TCPStore client.
//
// What it speaks: the c10d TCPStore wire protocol of LibTorch 1.13, which
// has no handshake. A query is one byte of type, then its arguments, in the
// client's (little-endian) byte order; a string or byte vector is a uint64
// length then the bytes:
//   0 SET key value             no reply; wakes the waiters, tells watchers
//   1 COMPARE_SET key old new   reply: the value now stored (bytes)
//   2 GET key                   reply: the value (bytes); a missing key
//                               drops the connection, as c10d's server does
//   3 ADD key int64             reply: the new int64 (the value is its text)
//   4 CHECK n key...            reply: 1 byte, 0 all present, 1 not
//   5 WAIT n key...             reply: 1 byte 0 (STOP_WAITING) once all exist
//   6 GETNUMKEYS                reply: int64
//   7 WATCH_KEY key             reply: 1 byte 3 (KEY_CALLBACK_REGISTERED);
//                               later, on each change: 1 byte (0 updated,
//                               1 created, 2 deleted), key, old, new
//   8 DELETE_KEY key            reply: int64, how many were deleted (0 or 1)
// Each c10d client opens two connections: one for queries and one (the
// "callback" connection) that stays idle unless it watches a key.
//
// Limits, so that a stray or hostile client cannot exhaust the launcher: a
// key is at most 4 KiB, a value 16 MiB, a CHECK/WAIT names at most 1024
// keys, all values together 256 MiB; at most max_connections connections
// (more are accepted and closed at once); a query must arrive whole within
// partial_timeout of its first byte, and a reply must drain within it too.
// An idle connection is not dropped (the callback connection is idle by
// design, and 1.13's client spins if the server closes it). Anything
// malformed (an unknown query type, a length over its limit, ADD on a value
// that is no integer) drops that one connection; the others go on.
//
// Thread safety: the server runs on one thread of its own, started by
// start(); its public methods are for the thread that owns it.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

namespace loom {

class StoreServer {
 public:
  struct Limits {
    size_t max_key = 4096;
    size_t max_value = 16u << 20;
    size_t max_keys_per_query = 1024;
    size_t max_total_bytes = 256u << 20;
    size_t max_connections = 64;
    std::chrono::milliseconds partial_timeout{std::chrono::seconds(30)};
  };

  // Binds addr (len bytes, AF_INET or AF_INET6; its port is ignored) at
  // port and listens there. Throws Error::runtime naming the address, the
  // port and the reason when it cannot.
  StoreServer(const sockaddr* addr, socklen_t len, int port, const Limits& limits);
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  // Stops the thread and closes every connection.
  ~StoreServer();

  // Starts serving on a thread of its own (connections queue until then).
  void start();
  int port() const { return port_; }

  // The byte that names a query on the wire in the c10d protocol this build
  // speaks (LibTorch 1.13's or 2.x's numbering differ): "set", "compare_set",
  // "get", "add", "check", "wait", "num_keys" or "delete_key"; -1 for others.
  // For tests that speak the protocol by hand.
  static int wire_code(const std::string& query);

 private:
  void run();

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a byte on wake_[1] stops run()
  int port_ = 0;
  Limits limits_;
  std::thread thread_;
};

}  // namespace loom
