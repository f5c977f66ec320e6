/* SPDX-License-Identifier: Apache-2.0 */
// Internal to the state download: one attempt against one donor
// (state_download.cpp), which the donors' race (state_download_race.cpp)
// runs several of at once, and a download spread over donors that hold the
// same bytes (Stripes, state_download_stripes.cpp).
#ifndef LOOM_COLLAB_STATE_DONOR_H
#define LOOM_COLLAB_STATE_DONOR_H

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "state_client.h"

#include "state_secret.h"
#include "state_transfer.h"

namespace loom_collab {

// Why a racing attempt stopped when another donor took the claim first.
constexpr const char *kLostRace = "another donor answered first";

// What tells one snapshot from another: donors whose replies agree on all
// of it hold the same bytes (the CRC is of the whole state's bytes).
struct StateIdentity {
  int64_t epoch = 0;
  uint64_t total = 0;
  uint32_t chunk = 0;
  uint32_t crc = 0;
  bool operator==(const StateIdentity &o) const {
    return epoch == o.epoch && total == o.total && chunk == o.chunk && crc == o.crc;
  }
};

// A donor's connection once its reply header has arrived.
struct OpenReply {
  wire::Fd fd;
  std::unique_ptr<StreamOpener> stream;  // with a key
  std::optional<ChunkKey> chunk_key;     // with a key
  uint8_t hb[kStateReplySize] = {};
  wire::ReplyHeader h;
};

// How an I/O failure reads in a message, naming an overall timeout apart
// from a stall.
IoText donor_io_text(wire::Clock::time_point deadline, std::chrono::milliseconds stall);

// Connects to d, sends the request (proving the key when keys is set) and
// reads the reply header, which must say ok and be sane. False with *why.
// push (may be null; with kStateFlagProgress): a record pushed with the
// request (kStateFlagProgressPush, added here).
bool open_donor(const Donor &d, uint64_t run, int64_t min_epoch, uint16_t flags, const StateKeys *keys,
                const wire::IoLimits &lim, const IoText &io_text, OpenReply *o, std::string *why, KeyRefusal *refusal,
                const Bytes *push = nullptr);

// Reads chunks first, first + 1, ... (up to count, and the state's end) of
// an open reply into base at their offsets, checking each (CRC or seal) on
// worker threads; crcs (may be null) gets each chunk's CRC at its index.
// take (may be null) is asked before each chunk: false stops there (the
// rest is another donor's). grow (may be null): a buffer grown to each
// chunk's end before it is read (base is its data, within its capacity).
// *read counts the chunks read. False with *why.
bool read_chunks(OpenReply &o, uint64_t first, uint64_t count, uint8_t *base, uint32_t *crcs,
                 const wire::IoLimits &lim, const IoText &io_text, const std::function<bool(uint64_t)> &take,
                 uint64_t *read, std::string *why, uint32_t *total_crc, Bytes *grow);

// A download spread over the donors that hold the same bytes. The race's
// winner streams the state from its start (take_in_order) while helpers
// fetch chunks from its end with range requests (take_from_top), so each
// chunk comes once and a fast donor brings more of them than a slow one;
// the stream stops where it meets the helpers' chunks. Thread-safe.
class Stripes {
 public:
  // The winner's reply: fixes the identity and allocates the buffer. False
  // with *why when the state is too large to be spread (over an eighth of
  // this machine's memory: its buffer is filled whole at once, where the
  // single stream grows it as bytes arrive).
  bool begin(const StateIdentity &id, size_t donor, std::string *why);
  bool ready() const;
  wire::Clock::time_point began() const;  // when begin() had its buffer ready
  int64_t fill_ms() const;                 // what filling that buffer took
  StateIdentity identity() const;
  size_t first_donor() const;
  uint8_t *base();
  uint32_t *crc_slots();  // one per chunk, written by the verifiers
  size_t chunks() const;
  // The winner's stream, before it reads chunk i: false once it is not free.
  bool take_in_order(size_t i);
  // A helper: free chunks ending at the highest free one, false when none
  // is free. Guided, as OpenMP's schedule: up to `most`, and at most the
  // free chunks over twice the donors at work (the winner and the helpers
  // between helping() and done_helping()), at least one; so ranges shrink
  // as the end nears, and the last ones a slow donor holds are short.
  bool take_from_top(uint32_t most, uint32_t *first, uint32_t *count);
  void helping();
  void done_helping();
  // Chunks [first, first + count) arrived, checked, from donor (its index in the race's list).
  void done(uint32_t first, uint32_t count, size_t donor);
  // Chunks taken and not brought (their donor failed): free again.
  void release(uint32_t first, uint32_t count);
  bool any_free() const;
  bool complete() const;
  // Once complete: the whole state's CRC, combined from the chunks', must be the identity's.
  bool check(std::string *why) const;
  // How many chunks each donor brought (by index).
  std::map<size_t, size_t> brought() const;
  Bytes take_bytes();
  // Back to before begin(), for the next winner (nobody may be fetching).
  void reset();

 private:
  mutable std::mutex m_;
  bool ready_ = false;
  wire::Clock::time_point began_;
  int64_t fill_ms_ = 0;
  StateIdentity id_;
  size_t first_donor_ = 0;
  Bytes bytes_;
  std::vector<uint8_t> state_;  // per chunk: 0 free, 1 taken, 2 done
  std::vector<uint32_t> crcs_;
  std::map<size_t, size_t> brought_;
  uint32_t helpers_ = 0;
};

// A helper of a spread download: takes chunks from the top of *s and
// fetches them from d with range requests, until none is free. False with
// *why when d failed (its chunks are freed for others): unreachable,
// another snapshot (its identity differs), a bad chunk.
bool fetch_stripes(const Donor &d, size_t index, uint64_t run, Stripes *s, wire::Clock::time_point deadline,
                   std::chrono::milliseconds stall, const std::atomic<bool> *cancel, const StateKeys *keys,
                   std::string *why);

// One attempt against one donor. Returns the state or sets *why.
// flags: 0 for the state, kStateFlagModel for the model record,
// kStateFlagProgress for a progress table (min_epoch then names its key).
// claim (may be null; -1 while free): donors asked at once race for it;
// the first whose reply says ok takes it (as claimant) and sends its
// state, the others stop there with kLostRace. stripes (may be null; with
// claim): the claimant's state goes there, and its stream stops where
// helpers took over (the result's bytes are then empty). push: as for
// open_donor.
std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch,
                                         std::chrono::steady_clock::time_point deadline,
                                         std::chrono::milliseconds stall, const std::atomic<bool> *cancel,
                                         std::string *why, uint16_t flags = 0, const StateKeys *keys = nullptr,
                                         KeyRefusal *refusal = nullptr, std::atomic<int64_t> *claim = nullptr,
                                         int64_t claimant = 0, Stripes *stripes = nullptr,
                                         const Bytes *push = nullptr);

}  // namespace loom_collab

#endif
