/* SPDX-License-Identifier: Apache-2.0 */
// The state server's insides, shared by its files: state_server.cpp (the
// front thread: accepting, reading requests, the limits), state_admit.cpp
// (who is served and who turned away), state_server_auth.cpp
// (a swarm key's proofs) and state_serve.cpp (a transfer's own thread).
#ifndef LOOM_COLLAB_STATE_SERVER_IMPL_H
#define LOOM_COLLAB_STATE_SERVER_IMPL_H

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "serve_guard.h"
#include "state_secret.h"
#include "state_transfer.h"
#include "state_wire.h"

namespace loom_collab {
namespace server_detail {

using namespace wire;
constexpr milliseconds kResolveTimeout{5000};  // host name lookup at start
// Connections still sending their request, all addresses together; past it
// a new one takes the oldest one's place.
constexpr size_t kMaxPending = 128;
constexpr int kAcceptBurst = 64;  // accepts per wake, so pending requests are read in between
// A transfer may be preempted by a new request (when every slot is taken)
// once it is this old and has moved nothing for this long, or moves slower
// than kSlowBytesPerSecond on average: an honest joiner reads at once and
// fast, so it is the flooder's transfers that make room.
constexpr milliseconds kPreemptAfter{1000};
constexpr double kSlowBytesPerSecond = 64 * 1024;
// Progress requests (kStateFlagProgress) are small and come often (every
// peer reads some peer's records a few times a second): they take no
// transfer slot and no token of the state's bucket, but one of their own,
// kProgressPerMinute an address (all peers on loopback share one), and at
// most kMaxProgressServes are served at once (busy beyond).
constexpr double kProgressPerMinute = 1200;
constexpr int kMaxProgressServes = 8;
// Oob requests (kStateFlagOob) are held while a group's members arrive (up
// to kMaxOobHoldMs): a hub gets one from every member of every group it led
// (63 at once in a swarm of 64), so they have their own bound and bucket.
constexpr double kOobPerMinute = 6000;
constexpr int kMaxOobServes = 128;

// A published snapshot, made ready to send once, off the training thread:
// by the server's sealing thread right after publish(), or by the first
// transfer that needs it, whichever gets there first; others wait. Without
// a swarm key that means its chunk CRCs; with one, its chunks sealed in
// place under a chunk key of its own (state_secret.h), so transfers send
// the snapshot's bytes as they are, whatever the number of joiners. The work
// stops between chunks when `stop` says so (shutdown, or a newer snapshot
// made this one moot), so nobody waits long for an abandoned one; sealing
// resumes where it stopped, since its bytes change in place.
struct Snapshot {
  int64_t epoch = 0;
  Bytes bytes;
  bool keyed = false;  // set before the snapshot is shared

  // True once the fields below are valid (never written again after that);
  // false if stop() said so first.
  bool ensure_ready(const std::function<bool()> &stop);
  uint8_t header[kStateReplySize] = {};  // the ok reply's header
  std::vector<uint32_t> chunk_crcs;      // of the bytes (with a key too: before sealing)
  std::vector<ChunkKey::Tag> tags;       // with a key, one per chunk
  std::optional<ChunkKey> key;           // with a key

 private:
  wire::ReplyHeader ok_reply(uint32_t total_crc) const;  // the ok reply for these bytes
  bool checksum(const std::function<bool()> &stop);  // false: stopped
  bool seal(const std::function<bool()> &stop);
  enum { kIdle, kBusy, kDone };
  std::mutex mu_;
  std::condition_variable cv_;
  int state_ = kIdle;
};

}  // namespace server_detail

struct StateServer::Impl {
  using Snapshot = server_detail::Snapshot;
  using Clock = wire::Clock;
  using Fd = wire::Fd;
  using IoLimits = wire::IoLimits;
  ServeLimits limits;
  uint64_t run = 0;
  LogFn log;
  Fd listener;
  Fd stop_read, stop_write;  // a pipe: written once at shutdown, wakes every poll
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> wanted{false};
  std::atomic<int> active{0};
  std::atomic<uint64_t> chunks_out{0};  // chunks written, all transfers together
  std::atomic<int> pending_count{0};
  std::atomic<int64_t> wait_ms{2000};

  std::mutex m;
  std::condition_variable published;
  std::shared_ptr<Snapshot> snapshot;   // guarded by m
  Bytes spare;                          // storage prepare() faulted in, for publish_copy; guarded by m
  std::shared_ptr<Snapshot> model;      // what model requests get (null: not_ready); guarded by m
  std::pair<uint64_t, Bytes> own_progress;           // what progress requests get first; guarded by m
  std::vector<std::pair<uint64_t, Bytes>> progress;  // then these; guarded by m
  std::function<void(Bytes)> progress_push;          // guarded by m
  std::atomic<uint64_t> progress_pushed{0};
  std::atomic<int> progress_serving{0};
  std::atomic<uint64_t> progress_served{0};
  StateServer::OobHandler oob_handler;  // guarded by m
  std::atomic<int> oob_serving{0};
  std::atomic<uint64_t> oob_served{0};
  std::atomic<uint64_t> generation{0};  // bumped by publish(); guarded by m for the summer's wait
  std::thread front;
  std::thread summer;  // makes each new snapshot ready (Snapshot::ensure_ready) ahead of requests

  // A connection that has not yet sent its whole request: only bytes here.
  // With a swarm key the client's proof follows its request: `want` grows
  // to kStateRequestSize + kStateProofSize once the challenge is sent.
  struct Pending {
    Fd fd;
    std::string peer, addr;
    Clock::time_point since;
    size_t got = 0, want = kStateRequestSize;
    bool challenged = false;
    // A pushed progress record (kStateFlagProgressPush), read after the
    // request and before the challenge: its length, then its bytes.
    bool pushing = false;
    size_t push_got = 0;
    uint8_t push_len[4] = {};
    Bytes push;
    StateKeys::Nonce server_nonce{};
    uint8_t buf[kStateRequestSize + kStateProofSize];
  };
  std::list<Pending> pending;  // oldest first; the front thread's alone

  // How a transfer ended, for the token given back and the rejection log.
  enum class End { running, sent, no_data, stalled, cancelled, went_away };
  struct Transfer {
    Fd fd;  // closed by the front thread after the join, so a preempting thread never touches a reused fd
    std::string peer, addr;
    int64_t min_epoch = 0;
    bool model = false;  // a model request (kStateFlagModel), not the state
    bool relay = false;  // a client-mode peer's relay session (kStateFlagRelay): outside max_transfers
    bool dial = false;   // a dial-back request (kStateFlagDialBack)
    bool range = false;  // a range of chunks (kStateFlagRange; min_epoch packs it)
    bool progress = false;  // progress records (kStateFlagProgress; min_epoch packs the key): outside max_transfers
    bool oob = false;       // an oob part (kStateFlagOob; min_epoch is the hold): outside max_transfers
    Bytes push;             // an oob request's pushed part
    bool keyed = false;  // proven: the reply goes as an encrypted stream
    uint8_t request[kStateRequestSize];
    StateKeys::Nonce server_nonce{}, client_nonce{};
    Clock::time_point started, moved;  // moved: when the front thread last saw `sent` change
    uint64_t seen = 0;
    std::atomic<uint64_t> sent{0}, total{0};
    std::atomic<bool> cancel{false}, done{false};
    std::atomic<End> end{End::running};
    std::thread thread;
  };
  std::list<Transfer> transfers;  // the front thread's (and the destructor's) alone

  // Relaying (relay.h): set by set_relay, read by the front thread under m.
  RelayHandler relay_handler;
  int max_relayed = 0;
  uint64_t max_relay_values = 0;
  std::atomic<int> relaying{0};
  std::vector<uint64_t> probes;  // dial-back probes seen (their min_epoch values, the newest 64); under m

  ServeGuard guard;
  ServeGuard progress_guard{server_detail::kProgressPerMinute, nullptr};  // progress requests' own bucket (rejections: guard's log)
  ServeGuard oob_guard{server_detail::kOobPerMinute, nullptr};            // oob requests' own bucket
  std::unique_ptr<StateKeys> keys;  // a swarm key: every client must prove it

  explicit Impl(const ServeLimits &l, LogFn lg) : limits(l), log(std::move(lg)), guard(l.requests_per_minute, log) {}

  void sum_loop();
  void front_loop();
  void accept_some(Clock::time_point now);
  bool read_request(Pending &p, Clock::time_point now);  // true when p is finished with
  bool read_push(Pending &p, Clock::time_point now);     // the same, while a pushed record comes
  bool after_request(Pending &p, Clock::time_point now); // challenge or admit: true when p is finished with
  // The request's own checks (magic, version, checksum, flags, run); false
  // when p was refused (logged and answered).
  bool check_request(Pending &p, Clock::time_point now);
  // state_server_auth.cpp: with a key, sends p its challenge (false: p is
  // finished with), and checks its proof (false: refused).
  bool challenge(Pending &p, Clock::time_point now);
  bool check_proof(Pending &p, Clock::time_point now);
  // state_serve.cpp: with a key, the accept message for t and its stream.
  std::unique_ptr<StreamSealer> accept_keyed(Transfer &t, const IoLimits &lim, int *err, bool *ok);
  // progress_exchange.cpp: the table a progress request for the key packed
  // in `key` (level, shard) gets, as a snapshot ready to send.
  std::shared_ptr<Snapshot> progress_snapshot(int64_t key);
  // oob_hub.cpp: the table an oob request gets (the handler holds it up to
  // its hold), or null with *why.
  std::shared_ptr<Snapshot> oob_snapshot(Transfer &t, std::string *why);
  void make_room(const std::string &addr, Clock::time_point now);
  // Admits a checked (and, with a key, proven) request: rate, slots, thread.
  void admit(Pending &p, Clock::time_point now);
  Transfer *victim(Clock::time_point now);
  void watch_transfers(bool all, Clock::time_point now);
  void answer(int fd, StateStatus status);
  void serve(Transfer &t);
  // relay_serve.cpp: a client-mode peer's session, contribution after
  // contribution, until it leaves, idles past kRelayIdle or the server stops.
  void relay_session(Transfer &t, RelayHandler handler, uint64_t max_values);
  // dial_back.cpp: connects back to the requester and sends its probe.
  void dial_back(Transfer &t);
  // A probe (the front thread): noted when well formed; never answered.
  void note_probe(Pending &p, Clock::time_point now);
};

}  // namespace loom_collab

#endif
