// SPDX-License-Identifier: Apache-2.0
// A joiner's download spread over donors that hold the same bytes
// (state_donor.h's Stripes): the chunks' book-keeping, and a helper's range
// requests. A donor on a slow link then brings few chunks instead of
// setting the pace of the whole download.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>

#include "../common/huge_pages.h"
#include "state_donor.h"

namespace loom_collab {

using wire::Clock;

IoText donor_io_text(Clock::time_point deadline, std::chrono::milliseconds stall) {
  return [deadline, stall](wire::Io r, int err, const std::string &during) -> std::string {
    if (r != wire::Io::timeout) return io_failure(r, err, "donor", during);
    return Clock::now() >= deadline ? "overall timeout " + during
                                    : "stalled: nothing for " + std::to_string(stall.count()) + " ms " + during;
  };
}

bool Stripes::begin(const StateIdentity &id, size_t donor, std::string *why) {
  // The buffer is filled (zeroed) at once, before the bytes arrive, where
  // the single stream grows its buffer as they do: a donor that lies about
  // the size must not make this peer touch much memory for nothing.
  const uint64_t memory = loom_plugin_common::physical_memory();
  if (id.total > memory / 8) {
    *why = "a state of " + std::to_string(id.total) + " bytes is over an eighth of this machine's memory (" +
           std::to_string(memory) + " bytes) and is not spread over donors";
    return false;
  }
  const size_t n = id.chunk ? size_t((id.total + id.chunk - 1) / id.chunk) : 0;
  const auto fill_from = Clock::now();
  Bytes bytes;
  try {
    loom_plugin_common::reserve_huge(bytes, size_t(id.total));
    bytes.resize(size_t(id.total));  // chunks land out of order
  } catch (const std::exception &) {
    *why = "cannot allocate " + std::to_string(id.total) + " bytes for the state";
    return false;
  }
  std::lock_guard<std::mutex> g(m_);
  bytes_ = std::move(bytes);
  id_ = id;
  first_donor_ = donor;
  state_.assign(n, 0);
  crcs_.assign(n, 0);
  began_ = Clock::now();
  fill_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(began_ - fill_from).count();
  ready_ = true;
  return true;
}

bool Stripes::ready() const {
  std::lock_guard<std::mutex> g(m_);
  return ready_;
}
Clock::time_point Stripes::began() const {
  std::lock_guard<std::mutex> g(m_);
  return began_;
}
int64_t Stripes::fill_ms() const {
  std::lock_guard<std::mutex> g(m_);
  return fill_ms_;
}
StateIdentity Stripes::identity() const {
  std::lock_guard<std::mutex> g(m_);
  return id_;
}
size_t Stripes::first_donor() const {
  std::lock_guard<std::mutex> g(m_);
  return first_donor_;
}
uint8_t *Stripes::base() { return bytes_.data(); }  // fixed from begin() on
uint32_t *Stripes::crc_slots() { return crcs_.data(); }
size_t Stripes::chunks() const {
  std::lock_guard<std::mutex> g(m_);
  return state_.size();
}

bool Stripes::take_in_order(size_t i) {
  std::lock_guard<std::mutex> g(m_);
  if (i >= state_.size() || state_[i] != 0) return false;
  state_[i] = 1;
  return true;
}

bool Stripes::take_from_top(uint32_t most, uint32_t *first, uint32_t *count) {
  std::lock_guard<std::mutex> g(m_);
  size_t top = state_.size();
  while (top > 0 && state_[top - 1] != 0) --top;
  if (top == 0) return false;
  const size_t free = size_t(std::count(state_.begin(), state_.begin() + top, uint8_t(0)));
  most = uint32_t(std::max<size_t>(1, std::min<size_t>(most, free / (2 * (size_t(helpers_) + 1)))));
  size_t low = top - 1;
  while (low > 0 && top - low < most && state_[low - 1] == 0) --low;
  for (size_t i = low; i < top; ++i) state_[i] = 1;
  *first = uint32_t(low);
  *count = uint32_t(top - low);
  return true;
}

void Stripes::helping() {
  std::lock_guard<std::mutex> g(m_);
  ++helpers_;
}

void Stripes::done_helping() {
  std::lock_guard<std::mutex> g(m_);
  if (helpers_ > 0) --helpers_;
}

void Stripes::done(uint32_t first, uint32_t count, size_t donor) {
  std::lock_guard<std::mutex> g(m_);
  for (size_t i = first; i < size_t(first) + count && i < state_.size(); ++i) state_[i] = 2;
  brought_[donor] += count;
}

void Stripes::release(uint32_t first, uint32_t count) {
  std::lock_guard<std::mutex> g(m_);
  for (size_t i = first; i < size_t(first) + count && i < state_.size(); ++i)
    if (state_[i] == 1) state_[i] = 0;
}

bool Stripes::any_free() const {
  std::lock_guard<std::mutex> g(m_);
  return std::find(state_.begin(), state_.end(), uint8_t(0)) != state_.end();
}

bool Stripes::complete() const {
  std::lock_guard<std::mutex> g(m_);
  return ready_ && std::all_of(state_.begin(), state_.end(), [](uint8_t s) { return s == 2; });
}

bool Stripes::check(std::string *why) const {
  std::lock_guard<std::mutex> g(m_);
  uint32_t total = uint32_t(crc32_z(0, nullptr, 0));
  for (size_t i = 0; i < crcs_.size(); ++i) {
    const uint64_t n = std::min<uint64_t>(id_.chunk, id_.total - uint64_t(i) * id_.chunk);
    total = uint32_t(crc32_combine(total, crcs_[i], z_off_t(n)));
  }
  if (total == id_.crc) return true;
  *why = "whole-state CRC mismatch across donors (computed " + wire::hex(total) + ", the donors sent " +
         wire::hex(id_.crc) + ")";
  return false;
}

std::map<size_t, size_t> Stripes::brought() const {
  std::lock_guard<std::mutex> g(m_);
  return brought_;
}

void Stripes::reset() {
  std::lock_guard<std::mutex> g(m_);
  ready_ = false;
  Bytes().swap(bytes_);
  state_.clear();
  crcs_.clear();
  brought_.clear();
}

Bytes Stripes::take_bytes() {
  std::lock_guard<std::mutex> g(m_);
  return std::move(bytes_);
}

bool fetch_stripes(const Donor &d, size_t index, uint64_t run, Stripes *s, Clock::time_point deadline,
                   std::chrono::milliseconds stall, const std::atomic<bool> *cancel, const StateKeys *keys,
                   std::string *why) {
  // Up to 4 MiB of free chunks per request (guided: fewer near the end,
  // take_from_top): each request is a connection
  // (with a key, a handshake too) whose TCP starts slow, which one chunk
  // of 1 MiB does not pay for behind a link with a deep queue (4 MiB chunks
  // took 1.8 s over a 100 Mbit/s link in netns.stripes, 1 MiB ones 3-3.6 s).
  // What a slow donor still holds when the others are done delays the end
  // by at most one range at its pace (nobody fetches it again meanwhile).
  struct Helping {
    Stripes *s;
    explicit Helping(Stripes *to) : s(to) { s->helping(); }
    ~Helping() { s->done_helping(); }
  } helping(s);
  const StateIdentity id = s->identity();
  const uint32_t kChunksPerRange = std::max<uint32_t>(1, (4u << 20) / std::max<uint32_t>(1, id.chunk));
  const wire::IoLimits lim{stall, deadline, cancel, -1};
  const IoText io_text = donor_io_text(deadline, stall);
  uint32_t first = 0, count = 0;
  while (s->take_from_top(kChunksPerRange, &first, &count)) {
    OpenReply o;
    KeyRefusal refusal = KeyRefusal::none;
    const uint16_t flags = kStateFlagRange | (keys ? kStateFlagKeyed : 0);
    bool ok = open_donor(d, run, pack_range(id.epoch, first, count), flags, keys, lim, io_text, &o, why, &refusal);
    if (ok && o.h.chunk != id.chunk && o.h.epoch == id.epoch && o.h.total == id.total && o.h.total_crc == id.crc) {
      *why = "it cuts the state in chunks of " + std::to_string(o.h.chunk) + " bytes, the first donor in chunks of " +
             std::to_string(id.chunk) + " (another version of Loom)";
      ok = false;
    } else if (ok && !(StateIdentity{o.h.epoch, o.h.total, o.h.chunk, o.h.total_crc} == id)) {
      *why = "it holds other bytes of epoch " + std::to_string(o.h.epoch) + " (CRC " + wire::hex(o.h.total_crc) +
             ", " + std::to_string(o.h.total) + " bytes) than the first donor";
      ok = false;
    }
    uint64_t read = 0;
    if (ok) ok = read_chunks(o, first, count, s->base(), s->crc_slots(), lim, io_text, nullptr, &read, why, nullptr,
                             nullptr);
    if (ok && read != count) {
      *why = "it sent " + std::to_string(read) + " of " + std::to_string(count) + " chunks";
      ok = false;
    }
    if (!ok) {
      s->release(first, count);
      return false;
    }
    s->done(first, count, index);
  }
  return true;
}

}  // namespace loom_collab
