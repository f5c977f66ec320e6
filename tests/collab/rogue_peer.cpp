// SPDX-License-Identifier: Apache-2.0
// A misbehaving swarm member for the bad-input tests.
//
//   loom_swarm_rogue RUN_ID HOST:PORT SECONDS
//     joins a run's DHT and publishes, under the run's progress key, a record
//     of another run, a truncated record, a record with a flipped bit and
//     plain garbage, again and again until killed or its time is up; and,
//     once it has seen an honest peer's records, that peer's first record
//     again (a replay) and its latest signed by the rogue's own key (a
//     forgery: another peer's id). Prints
//     "rogue dht 127.0.0.1:PORT" once it joined (a DHT node without a state
//     server: a peer that joins through it cannot ask it for the model).
//   loom_swarm_rogue --donor RUN_ID HOST:PORT|- SECONDS
//     joins the run (or, with -, starts its DHT for others to join) as a donor: it publishes a well-formed progress record at
//     the highest epoch it sees, and its state server answers every request
//     with a state whose chunk checksum is wrong; once it has served one, it
//     says goodbye (a record flagged as left) and exits. Prints "rogue dht
//     127.0.0.1:PORT" once its DHT node listens, so peers can join through it.
//   loom_swarm_rogue --stall RUN_ID HOST:PORT SECONDS
//     joins the run as a donor 20 epochs ahead of the highest epoch it sees
//     (a progress record that sends peers to load its state), and its state
//     server accepts every connection and answers nothing, holding it open:
//     a donor that hangs. Prints "rogue stalled N" per connection held.
//   loom_swarm_rogue --poison RUN_ID HOST:PORT SECONDS EVERY
//     serves a poisoned training state as a donor (rogue_poison.cpp).
//   loom_swarm_rogue --ghost RUN_ID HOST:PORT SECONDS
//     joins rounds as their leader and never closes them (rogue_ghost.cpp).
//   loom_swarm_rogue [--run RUN_ID] [--idle N] [--slowloris N] [--slow-readers N]
//                    [--garbage N] HOST:PORT SECONDS
//     floods one donor's state server with junk connections (rogue_flood.cpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dht.h"
#include "rogue_support.hpp"
#include "records.h"
#include "state_transfer.h"

using namespace loom_collab;
using Clock = std::chrono::steady_clock;

namespace {

void put(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}

void send_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p += w;
    n -= size_t(w);
  }
}

// Answers each state request (wire format of state_transfer.h) with a 4 KiB
// state of `epoch` whose only chunk carries a wrong CRC; other requests (a
// peer asking for its progress records) are closed unanswered.
void serve_bad_state(int listener, const std::atomic<int64_t> *epoch, const std::atomic<bool> *stop,
                     std::atomic<int> *served) {
  while (!*stop) {
    timeval tv{0, 200000};
    ::setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t request[kStateRequestSize];
    size_t got = 0;
    for (int tries = 0; got < sizeof request && tries < 25; ++tries) {
      ssize_t r = ::recv(fd, request + got, sizeof request - got, 0);
      if (r == 0) break;
      if (r > 0) got += size_t(r);
    }
    const unsigned flags = got == sizeof request ? unsigned(request[6] | (request[7] << 8)) : ~0u;
    if (flags & ~unsigned(kStateFlagRange)) {
      ::close(fd);
      continue;
    }
    Bytes state(4096, 0x5A);
    const uint32_t good = uint32_t(crc32_z(0, state.data(), state.size()));
    uint8_t h[kStateReplySize];
    put(h, kStateReplyMagic, 4);
    put(h + 4, kStateWireVersion, 2);
    put(h + 6, 0, 2);  // ok
    put(h + 8, uint64_t(epoch->load()), 8);
    put(h + 16, state.size(), 8);
    put(h + 24, state.size(), 4);
    put(h + 28, good, 4);
    put(h + 32, uint32_t(crc32_z(0, h, 32)), 4);
    uint8_t chunk[kStateChunkHeaderSize];
    put(chunk, state.size(), 4);
    put(chunk + 4, good ^ 0x1u, 4);  // the defect
    send_all(fd, h, sizeof h);
    send_all(fd, chunk, sizeof chunk);
    send_all(fd, state.data(), state.size());
    ::close(fd);
    ++*served;
  }
}

// Accepts connections and holds them, unanswered, until stop.
void serve_nothing(int listener, const std::atomic<bool> *stop) {
  std::vector<int> held;
  while (!*stop) {
    timeval tv{0, 200000};
    ::setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    held.push_back(fd);
    std::printf("rogue stalled %zu\n", held.size());
    std::fflush(stdout);
  }
  for (int fd : held) ::close(fd);
}

int run_donor(const std::string &run_id, const std::string &bootstrap, int seconds, bool stall) {
  const Identity identity;
  const auto node = join_dht(bootstrap);
  if (!node) return 1;
  SwarmDht &dht = *node;
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 16) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    std::perror("rogue: state server");
    return 1;
  }
  std::printf("rogue peer %llu\nrogue dht 127.0.0.1:%u\n", static_cast<unsigned long long>(identity.id()),
              unsigned(dht.port()));
  std::fflush(stdout);
  std::atomic<int64_t> epoch{0};
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::thread server = stall ? std::thread(serve_nothing, listener, &stop)
                             : std::thread(serve_bad_state, listener, &epoch, &stop, &served);
  const int64_t ahead = stall ? 20 : 0;
  const uint64_t run = run_hash(run_id);
  ProgressRecord me;
  me.peer_id = identity.id();
  me.state_host = "127.0.0.1";
  me.state_port = ntohs(addr.sin_port);
  const std::string key = progress_key(run_id);
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < until && served == 0) {
    for (const auto &raw : dht.get(key, std::chrono::milliseconds(300))) {
      std::string why;
      auto r = decode_progress(run, raw.data(), raw.size(), &why);
      if (r && r->peer_id != me.peer_id) me.fingerprint = r->fingerprint;  // poses as a peer of the same model
      if (r && r->peer_id != me.peer_id && r->epoch > epoch) {
        epoch = r->epoch;
        std::printf("rogue epoch %lld\n", static_cast<long long>(r->epoch));
        std::fflush(stdout);
      }
    }
    me.epoch = epoch + ahead;
    me.time_ms = wall_ms();
    dht.put(key, me.peer_id, encode(run, me, identity), std::chrono::seconds(10), std::chrono::milliseconds(500));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::printf("rogue served %d bad states\n", served.load());
  std::fflush(stdout);
  me.flags = ProgressRecord::kLeft;
  me.time_ms = wall_ms();
  dht.put(key, me.peer_id, encode(run, me, identity), std::chrono::seconds(10), std::chrono::milliseconds(500));
  stop = true;
  server.join();
  ::close(listener);
  return 0;
}

// honest's record as it would be, signed by signer instead: encode() refuses
// to make one, so the peer id is patched in and the record signed again.
Bytes forge(uint64_t run, ProgressRecord honest, const Identity &signer) {
  const uint64_t victim = honest.peer_id;
  honest.peer_id = signer.id();
  honest.time_ms = wall_ms();
  Bytes b = encode(run, honest, signer);
  constexpr size_t kHeader = 18;  // records.cpp's layout: header, payload, key, signature, CRC
  for (int i = 0; i < 8; ++i) b[kHeader + size_t(i)] = static_cast<uint8_t>(victim >> (8 * i));
  const size_t signed_bytes = b.size() - 64 - 4;
  const Signature sig = signer.sign(b.data(), signed_bytes);
  std::copy(sig.begin(), sig.end(), b.begin() + long(signed_bytes));
  const uint32_t crc = static_cast<uint32_t>(crc32_z(0, b.data(), b.size() - 4));
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + size_t(i)] = static_cast<uint8_t>(crc >> (8 * i));
  return b;
}

int run_records(const std::string &run_id, const std::string &bootstrap, int seconds) {
  const auto node = join_dht(bootstrap);
  if (!node) return 1;
  SwarmDht &dht = *node;
  // Others may join through this node: it has no state server.
  std::printf("rogue dht 127.0.0.1:%u\n", unsigned(dht.port()));
  std::fflush(stdout);
  const Identity identity;
  ProgressRecord r;
  r.peer_id = identity.id();
  r.epoch = 5;
  r.samples = 100;
  r.samples_per_second = 10;
  r.state_host = "127.0.0.1";
  r.state_port = 9;
  const std::string key = progress_key(run_id);
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  uint64_t victim = 0;
  Bytes captured, forged;
  int64_t captured_ms = 0;
  bool newer = false;
  while (Clock::now() < until) {
    r.time_ms = wall_ms();
    Bytes other = encode(run_hash(run_id + "-another-run"), r, identity);
    Bytes good = encode(run_hash(run_id), r, identity);
    Bytes truncated(good.begin(), good.begin() + long(good.size() / 2));
    Bytes flipped = good;
    flipped[flipped.size() / 2] ^= 0x10;
    Bytes garbage = {'n', 'o', 't', ' ', 'a', ' ', 'r', 'e', 'c', 'o', 'r', 'd'};
    uint64_t id = 0xBAD000;
    for (const Bytes *b : {&other, &truncated, &flipped, &garbage})
      dht.put(key, ++id, *b, std::chrono::seconds(10), std::chrono::milliseconds(500));
    // An honest peer's record, kept as first seen and replayed once that
    // peer said something newer; and its latest, re-signed by this rogue
    // under the honest peer's id.
    for (const auto &raw : dht.get(key, std::chrono::milliseconds(300))) {
      auto seen = decode_progress(run_hash(run_id), raw.data(), raw.size(), nullptr);
      if (!seen || seen->peer_id == identity.id() || (victim != 0 && seen->peer_id != victim)) continue;
      if (victim == 0) {
        victim = seen->peer_id;
        captured = raw;
        captured_ms = seen->time_ms;
      }
      if (seen->time_ms > captured_ms + 1500) newer = true;
      forged = forge(run_hash(run_id), *seen, identity);
    }
    if (newer) dht.put(key, ++id, captured, std::chrono::seconds(10), std::chrono::milliseconds(500));
    if (!forged.empty()) dht.put(key, ++id, forged, std::chrono::seconds(10), std::chrono::milliseconds(500));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return 0;
}

}  // namespace

int flood_main(int argc, char **argv);  // rogue_flood.cpp
int poison_main(const std::string &run_id, const std::string &bootstrap, int seconds, int every);  // rogue_poison.cpp
int ghost_main(const std::string &run_id, const std::string &bootstrap, int seconds);  // rogue_ghost.cpp

int main(int argc, char **argv) {
  if (argc == 6 && std::strcmp(argv[1], "--poison") == 0)
    return poison_main(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]));
  if (argc == 5 && std::strcmp(argv[1], "--ghost") == 0) return ghost_main(argv[2], argv[3], std::atoi(argv[4]));
  const bool stall = argc > 1 && std::strcmp(argv[1], "--stall") == 0;
  if (argc > 1 && std::strncmp(argv[1], "--", 2) == 0 && std::strcmp(argv[1], "--donor") != 0 && !stall)
    return flood_main(argc, argv);
  const bool donor = argc == 5 && (stall || std::strcmp(argv[1], "--donor") == 0);
  if (argc != 4 && !donor) {
    std::fprintf(stderr, "usage: %s [--donor|--stall] RUN_ID HOST:PORT SECONDS\n       %s [--run RUN_ID] [--idle N] "
                 "[--slowloris N] [--slow-readers N] [--garbage N] HOST:PORT SECONDS\n", argv[0], argv[0]);
    return 2;
  }
  char **args = argv + (donor ? 2 : 1);
  return donor ? run_donor(args[0], args[1], std::atoi(args[2]), stall)
               : run_records(args[0], args[1], std::atoi(args[2]));
}
