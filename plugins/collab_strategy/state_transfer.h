/* SPDX-License-Identifier: Apache-2.0 */
// Training-state download between peers over TCP: a joining or lagging peer
// fetches the whole state (a snapshot's bytes) from a donor, in chunks, each
// with a CRC-32, plus a CRC-32 of the whole, and moves on to the next donor
// if one dies, stalls, sends a bad checksum or is behind min_epoch.
// state_server.cpp holds the donor's side, state_download.cpp one attempt of
// the joiner's and state_download_race.cpp its race among donors,
// state_wire.{h,cpp} what both share.
#ifndef LOOM_COLLAB_STATE_TRANSFER_H
#define LOOM_COLLAB_STATE_TRANSFER_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "log.h"
#include "records.h"
#include "top_up_grants.h"
#include "../common/swarm_key.h"

namespace loom_collab {

// The wire format (little-endian, fixed width), version kStateWireVersion.
// The first 8 bytes of a request and of a reply (magic, version) never change
// between versions, so either side can name a version it does not speak.
//   request (28 B): magic kStateRequestMagic u32, version u16, flags u16,
//                   run hash u64, min_epoch i64, CRC-32 of the previous 24 B
//                   (flags: 0 asks for the state; kStateFlagModel for the
//                   server's model record instead; other bits are refused)
//   reply   (36 B): magic kStateReplyMagic u32, version u16, status u16,
//                   epoch i64, total length u64, chunk size u32,
//                   CRC-32 of the whole state u32, CRC-32 of the previous 32 B
//   then, when status is ok, ceil(total / chunk size) chunks, each
//                   length u32 (= min(chunk size, bytes left)), CRC-32 u32, bytes.
// CRC-32 is zlib's crc32_z. The server closes the connection after a reply.
//
// In a swarm with a key (state_secret.h), a request carries kStateFlagKeyed
// and both sides prove they hold the key before anything is served:
//   server (36 B): magic kStateChallengeMagic u32, server nonce (32 B)
//   client (64 B): client nonce (32 B), client proof (32 B)
//   server (60 B): magic kStateAcceptMagic u32, stream header (24 B), server proof (32 B)
//   then one frame of an encrypted stream, marked final: length u32 and the
//   ciphertext of the reply header above (CRC of the whole state's bytes, or
//   0 from servers before range requests), followed,
//   when status is ok, by the snapshot's chunk key (32 B);
//   then, when status is ok, the chunks, each length u32, tag (16 B), and
//   the chunk's bytes as sealed under the chunk key (nonce: the chunk's
//   index from 0; additional data: the 36-byte reply header).
// A refusal at any step is a plain 36-byte reply: a keyed server answers a
// request without the flag, or a proof that does not match, with status
// not_key_holder (before the request holds a transfer slot or a token); a
// server without a key answers the flag with bad_request.
// A model request's reply has the same form: its bytes are an encoded
// FingerprintRecord (records.h), at most kMaxModelBytes, and its epoch 0;
// status not_ready means the server is not sure its model is the
// swarm's (it has just joined, or it is the odd one out).
constexpr uint32_t kStateRequestMagic = 0x5154534C;  // "LSTQ"
constexpr uint32_t kStateReplyMagic = 0x5254534C;    // "LSTR"
constexpr uint16_t kStateWireVersion = 2;  // 2: keyed chunks sealed once per snapshot
constexpr uint16_t kStateFlagModel = 1;
constexpr uint16_t kStateFlagKeyed = 2;
// A dial-back request (kStateFlagDialBack) asks the server to connect to the
// client's own address (the request's source IP) at the port in the low 16
// bits of min_epoch and send a probe there: a request-shaped 28 bytes with
// magic kStateProbeMagic whose min_epoch field echoes the request's (its
// high 48 bits a nonce of the client's). The server answers the request
// itself with nothing but, when keyed, its accept message. A client that
// sees its probe arrive knows others can connect to it (Peer's reachability
// check); one that does not is behind NAT or a firewall.
constexpr uint16_t kStateFlagDialBack = 8;
constexpr uint32_t kStateProbeMagic = 0x5054534C;  // "LSTP"
// A range request (kStateFlagRange) asks for chunks [first, first + count)
// of the snapshot of exactly `epoch` the server has published, packed into
// the min_epoch field by pack_range. The reply is the ok reply's header, as
// for the whole state, then those chunks only; a server holding a snapshot
// of another epoch answers behind (with its epoch) without waiting for a
// newer one. A joiner spreads its download over several donors with these
// (state_download_stripes.cpp). A reply's whole-state CRC is that of the
// state's bytes with a key too, so that a joiner can tell donors holding
// the same bytes apart from the others.
constexpr uint16_t kStateFlagRange = 16;
constexpr int kRangeBits = 14;  // first and count: up to 16383 chunks (64 GiB)
constexpr uint32_t kMaxRangeChunks = (1u << kRangeBits) - 1;
inline int64_t pack_range(int64_t epoch, uint32_t first, uint32_t count) {
  return int64_t((uint64_t(epoch) << (2 * kRangeBits)) | (uint64_t(first) << kRangeBits) | count);
}
inline void unpack_range(int64_t v, int64_t *epoch, uint32_t *first, uint32_t *count) {
  *epoch = int64_t(uint64_t(v) >> (2 * kRangeBits));
  *first = uint32_t((uint64_t(v) >> kRangeBits) & kMaxRangeChunks);
  *count = uint32_t(uint64_t(v) & kMaxRangeChunks);
}
// A progress request (kStateFlagProgress) asks for the signed progress
// records the server holds (its own and those it read lately) of one DHT
// progress key: the key's level in the high 32 bits of min_epoch, its shard
// in the low 32 (progress_shards.h; 0, 0 for the one key of a small swarm).
// The reply is the ok reply's header with epoch 0, then its bytes as a state
// is sent (chunks, sealed with a key): a progress table of at most
// kMaxProgressBytes, count u32, then per record length u32 and the record's
// bytes exactly as the DHT carries them (records.h's encode), so the reader
// checks each one's signature as for a DHT read and a server can withhold a
// record but never forge one. Peers read one another's progress this way
// between DHT reads (peer_progress.cpp): a DHT read of N records costs
// 16 (N + 1) datagrams (dht.cpp), this one request and one reply.
constexpr uint16_t kStateFlagProgress = 32;
// A progress request may push the reader's own record too
// (kStateFlagProgressPush, only with kStateFlagProgress): right after the
// 28-byte request, before any proof of the key, length u32 (1 to
// kMaxPushedProgressBytes) and that many bytes, the reader's record
// encoded as for the DHT; with a swarm key sealed (seal.h's Sealer, the
// associated data naming the run), so that only key holders read or make
// one. The server hands it on (set_progress_push) once the request is
// admitted; its owner checks its signature as for any record. Pushes carry
// each reader's record to the peers it reads, so records spread from peer
// to peer (push-pull gossip) and DHT reads of progress can be rare.
constexpr uint16_t kStateFlagProgressPush = 64;
constexpr uint32_t kMaxPushedProgressBytes = 4096;
// An oob request (kStateFlagOob, always with kStateFlagProgressPush) is a
// group member's part of its communicator's out-of-band exchange
// (oob_hub.h), sent to the server of the peer that led the group, its hub,
// instead of through the DHT. The push is the member's signed OobRecord
// (records.h; sealed with a swarm key as a progress push is, under its own
// associated data), up to kMaxPushedOobBytes; min_epoch is how long the
// server may hold its reply, 1 to kMaxOobHoldMs. The reply is a progress
// table (below) of the parts the hub holds for that group, sent once it
// holds one for every rank or the hold ends, whichever comes first.
constexpr uint16_t kStateFlagOob = 128;
constexpr uint32_t kMaxPushedOobBytes = 64 * 1024;
constexpr int64_t kMaxOobHoldMs = 10000;
constexpr uint64_t kMaxProgressBytes = 256 * 1024;
constexpr uint32_t kMaxProgressRecords = 4096;
constexpr uint32_t kStateChallengeMagic = 0x4b54534C;  // "LSTK"
constexpr uint32_t kStateAcceptMagic = 0x4154534C;     // "LSTA"
constexpr size_t kStateChallengeSize = 36;
constexpr size_t kStateProofSize = 64;
constexpr size_t kStateAcceptSize = 60;
constexpr uint64_t kMaxModelBytes = 64 * 1024;
constexpr size_t kStateRequestSize = 28;
constexpr size_t kStateReplySize = 36;
constexpr size_t kStateChunkHeaderSize = 8;
constexpr size_t kStateSealedChunkHeaderSize = 20;  // with a key: length, tag
constexpr size_t kStateChunkKeySize = 32;
// Limits a client checks before it allocates anything.
constexpr uint64_t kMaxStateBytes = uint64_t(64) << 30;  // 64 GiB
constexpr uint32_t kMaxStateChunk = 64u << 20;           // 64 MiB

enum class StateStatus : uint16_t {
  ok = 0,
  not_ready = 1,    // nothing published within wait_for_publish
  other_run = 2,    // the request's run hash is not the server's
  behind = 3,       // published epoch < min_epoch (the reply carries it)
  busy = 4,         // too many transfers under way, or over the request rate; try another donor
  bad_request = 5,  // e.g. a version the server does not speak
  not_key_holder = 6,  // the swarm has a key and the client did not prove it holds it
};
const char *to_string(StateStatus s);

// What a state server lets its clients hold, so that a few addresses or a
// flood of junk connections can never keep an honest joiner out. An honest
// joiner sends its 28-byte request as soon as it connects and then reads at
// full speed; the limits drop whoever does neither, and they judge
// behaviour rather than address alone, because many honest peers may share
// one address (NAT; on loopback every peer is 127.0.0.1):
//  - A connection has idle_timeout to send its whole request. Those still
//    sending are held without a thread or buffer beyond their 28 bytes; one
//    address may hold max_pending_per_address of them (128 in all), and a
//    newer connection takes its oldest one's place, so a newcomer that asks
//    at once is always read.
//  - At most max_transfers are served at once. When all are taken, a new
//    request takes the slot of a transfer that has moved nothing for a
//    second or averages under 64 KiB/s (the longest stalled first), else it
//    is answered busy; a transfer that moves nothing for idle_timeout is
//    reset. Threads: at most 2 * max_transfers (serving, and being ended).
//  - One address may be served requests_per_minute requests a minute (a
//    token bucket); a request that ended with little of the state sent gives
//    its token back in proportion, so being dropped costs an address nothing.
// Rejections are logged at most once a minute per address, with counts.
// The collab strategy's serve_* options set these (options.cpp).
struct ServeLimits {
  int max_transfers = 16;
  int max_pending_per_address = 8;
  double requests_per_minute = 60;
  std::chrono::milliseconds idle_timeout{5000};
};

struct RelayMessage;  // relay.h
// A relay's side of relaying (relay.h), called on a client's connection
// thread for each of its contributions (its size checked already):
// replaces msg by the result, waiting for the round; stop() says when to
// give up (the server is shutting down, or the client went away).
using RelayHandler =
    std::function<void(const std::string &client, RelayMessage &msg, const std::function<bool()> &stop)>;

// Serves the latest published snapshot from background threads, so serving
// never runs on (or waits for) the training thread. Thread-safe.
class StateServer {
 public:
  // Binds TCP host:port (port 0: any; if port is taken, any) and starts
  // serving. Throws std::runtime_error naming the address on failure, and
  // std::invalid_argument for limits out of range (each must be positive).
  // With key, only clients that prove they hold it are served, over an
  // encrypted stream (state_secret.h).
  StateServer(const std::string &host, uint16_t port, uint64_t run, LogFn log,
              const ServeLimits &limits = ServeLimits(), const std::optional<loom_key::SwarmKey> &key = std::nullopt);
  ~StateServer();  // stops accepting, ends transfers, joins threads
  StateServer(const StateServer &) = delete;
  StateServer &operator=(const StateServer &) = delete;

  uint16_t port() const;

  // Makes (epoch, bytes) what later requests receive. Transfers under way
  // finish with the snapshot they started with.
  void publish(int64_t epoch, Bytes bytes);
  // The same for bytes this server copies, into the last snapshot's
  // storage when no transfer still reads it.
  void publish_copy(int64_t epoch, const uint8_t *data, size_t len);
  // Faults in storage for a snapshot of len bytes now, so that the first
  // publish_copy (a joiner waits for it) fills memory already mapped: a
  // fresh 130 MB buffer took 0.3-0.5 s to fill on these machines, a mapped
  // one 7 ms. Publishes nothing.
  void prepare(size_t len);
  // True when a client asked for state newer than what is published (or
  // nothing is published yet) since the last publish: the training thread
  // then takes a snapshot at its next safe point and publishes it. A client
  // waits up to wait_for_publish for that before it is told "not ready".
  bool wanted() const;
  // Transfers in progress (a donor with none is idle).
  int active() const;
  // Chunks written to clients so far, every transfer together (written:
  // in the socket's queue, perhaps not yet read).
  uint64_t chunks_sent() const;
  // Connections that have not yet sent their whole request.
  int pending() const;

  void set_wait_for_publish(std::chrono::milliseconds ms);

  // Takes up to max_clients client-mode peers at once (relay.h), each with
  // a connection and a thread of its own, outside max_transfers; a
  // contribution's values are at most max_values. Without it (or with 0),
  // relay requests are answered bad_request.
  void set_relay(RelayHandler handler, int max_clients, uint64_t max_values);
  // Client-mode peers connected now.
  int relaying() const;

  // What progress requests receive: this peer's own record (set apart,
  // since it changes with every sample refresh while the others change
  // with reads), then the others' records (peer id, encoded bytes), newest
  // first, each request getting those of the key it names (progress_shards.h's
  // shard_of) up to kMaxProgressBytes. Nothing published: an empty table.
  void publish_own_progress(uint64_t peer_id, Bytes record);
  void publish_progress(std::vector<std::pair<uint64_t, Bytes>> records);
  // Receives the record each admitted progress request pushed (the bytes
  // as sent, unchecked), on the server's thread: it must only queue them.
  // Without it, pushed records are read and dropped.
  void set_progress_push(std::function<void(Bytes)> handler);
  // Pushed records received so far (handed on or not).
  uint64_t progress_pushed() const;
  // Progress requests answered so far.
  uint64_t progress_served() const;

  // Answers oob requests (kStateFlagOob, oob_hub.h): called on the
  // request's own thread with the pushed bytes as sent and how long the
  // client allowed; returns the reply's table, or nullopt with *why (the
  // client is then answered bad_request). At most kMaxOobServes are held
  // at once (busy beyond). Without it, oob requests are answered
  // bad_request.
  using OobHandler = std::function<std::optional<Bytes>(const Bytes &pushed, std::chrono::milliseconds hold,
                                                         const std::function<bool()> &stop, std::string *why)>;
  void set_oob_handler(OobHandler handler);
  // Oob requests answered with a table so far.
  uint64_t oob_served() const;

  // Whether a dial-back probe (kStateProbeMagic) carrying this min_epoch
  // value (port and nonce) reached this server.
  bool saw_probe(uint64_t value) const;

  // What model requests receive: an encoded FingerprintRecord of the model
  // the swarm trains, as this peer sees it (at most kMaxModelBytes), or
  // nothing (empty: they are answered not_ready).
  void publish_model(Bytes record);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// snapshot_ahead = "auto": whether a donor's snapshot at an epoch's start,
// before any joiner asks, is worth its copies. The last snapshot took
// snapshot_ms (negative: none yet, so this one measures it); the epoch that
// just ended took epoch_ms. It pays while it costs at most kSnapshotAheadShare
// of the epoch: every epoch pays it, a joiner's wait for the donor's next
// step boundary (up to a step) is saved only when one comes.
constexpr double kSnapshotAheadShare = 0.02;
inline bool snapshot_ahead_pays(double snapshot_ms, double epoch_ms) {
  return snapshot_ms < 0 || snapshot_ms <= kSnapshotAheadShare * epoch_ms;
}

// Asks the peer whose state server listens at host:port what model its
// swarm trains (a model request), within timeout. Returns the encoded
// FingerprintRecord, or nullopt with *why (unreachable, refused, not sure
// of its model, malformed reply).
// Why a donor refused over the swarm key, when it did.
enum class KeyRefusal {
  none,
  lacks_key,      // the donor's swarm has a key; this peer offered none
  other_key,      // both hold keys, not the same one
  swarm_has_none  // this peer offered a key; the donor's swarm has none
};
std::optional<Bytes> fetch_model(const std::string &host, uint16_t port, uint64_t run,
                                 std::chrono::milliseconds timeout, std::string *why,
                                 const std::optional<loom_key::SwarmKey> &key = std::nullopt,
                                 KeyRefusal *refusal = nullptr);

// Asks the peer whose state server listens at host:port for the progress
// records it holds of the key (level, shard) (a progress request), within
// timeout. Returns the records' bytes, undecoded (the caller checks each
// like a DHT value), or nullopt with *why. *wire_bytes, when not null, gets
// the reply's size. push (may be null): this reader's own record, pushed
// with the request (kStateFlagProgressPush; sealed by the caller in a
// keyed swarm).
std::optional<std::vector<Bytes>> fetch_progress(const std::string &host, uint16_t port, uint64_t run, int level,
                                                 uint32_t shard, std::chrono::milliseconds timeout, std::string *why,
                                                 const std::optional<loom_key::SwarmKey> &key = std::nullopt,
                                                 uint64_t *wire_bytes = nullptr, const Bytes *push = nullptr);
// Sends this member's part (push: its encoded OobRecord, sealed by the
// caller in a keyed swarm) to the hub whose state server listens at
// host:port, which may hold its reply for `hold` while other members'
// parts arrive; within timeout (which must exceed hold). Returns the parts
// the hub held for the group, undecoded (the caller checks each as a DHT
// value), or nullopt with *why.
std::optional<std::vector<Bytes>> fetch_oob(const std::string &host, uint16_t port, uint64_t run, const Bytes &push,
                                            std::chrono::milliseconds hold, std::chrono::milliseconds timeout,
                                            std::string *why, const std::optional<loom_key::SwarmKey> &key,
                                            const std::atomic<bool> *cancel);
// Asks the hub at host:port for a grant of a short round's top-up
// (top_up_grants.h; push: an encoded GrantAsk, sealed by the caller as a
// part is), answered at once; within timeout. nullopt with *why.
std::optional<Grant> fetch_grant(const std::string &host, uint16_t port, uint64_t run, const Bytes &push,
                                 std::chrono::milliseconds timeout, std::string *why,
                                 const std::optional<loom_key::SwarmKey> &key);
// A progress table's encoding (above): records beyond kMaxProgressBytes or
// kMaxProgressRecords are left out, from the end.
Bytes encode_progress_table(const std::vector<const Bytes *> &records);
// False with *why for a table that is not well formed (lengths past its
// end, too many records, bytes left over).
bool decode_progress_table(const uint8_t *p, size_t n, std::vector<Bytes> *out, std::string *why);

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

// With key, each donor must prove it holds the swarm key, and the state
// arrives encrypted. Asks up to `racing` donors at once, in the given order
// (the next one once one fails), and keeps the first whose reply says ok:
// the others stop there, and are asked again if that one fails midway.
// Returns a complete, checksummed state of epoch >= min_epoch, or nullopt
// once every donor failed or timeout passed in total. A donor that is
// unreachable, refuses, stalls for stall_timeout, sends a malformed reply or
// a bad checksum, or offers an older epoch is logged (warn) and skipped; one
// still asking when another won is not judged. *why summarises every
// attempt. cancel (may be null) stops it early from another thread.
// racing 1 asks one donor after another.
std::optional<DownloadedState> download_state(const std::vector<Donor> &donors, uint64_t run, int64_t min_epoch,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::milliseconds stall_timeout, const LogFn &log,
                                              std::string *why, const std::atomic<bool> *cancel = nullptr,
                                              const std::optional<loom_key::SwarmKey> &key = std::nullopt,
                                              size_t racing = 3);

}  // namespace loom_collab

#endif
