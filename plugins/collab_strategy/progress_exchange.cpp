// SPDX-License-Identifier: Apache-2.0
// Progress requests (state_transfer.h's kStateFlagProgress): the table a
// peer's state server hands out, and the reader's side. Peers read one
// another's progress records this way between DHT reads (peer_progress.cpp).
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "progress_shards.h"
#include "state_donor.h"
#include "state_secret.h"
#include "state_server_impl.h"

namespace loom_collab {

using namespace wire;

Bytes encode_progress_table(const std::vector<const Bytes *> &records) {
  Bytes out(4, 0);
  uint32_t count = 0;
  for (const Bytes *r : records) {
    if (count == kMaxProgressRecords || out.size() + 4 + r->size() > kMaxProgressBytes) break;
    const size_t at = out.size();
    out.resize(at + 4 + r->size());
    put32(out.data() + at, uint32_t(r->size()));
    std::copy(r->begin(), r->end(), out.begin() + long(at) + 4);
    ++count;
  }
  put32(out.data(), count);
  return out;
}

bool decode_progress_table(const uint8_t *p, size_t n, std::vector<Bytes> *out, std::string *why) {
  out->clear();
  if (n < 4) {
    *why = "a progress table of " + std::to_string(n) + " bytes, shorter than its 4-byte count";
    return false;
  }
  const uint32_t count = get32(p);
  if (count > kMaxProgressRecords) {
    *why = "a progress table of " + std::to_string(count) + " records (at most " +
           std::to_string(kMaxProgressRecords) + ")";
    return false;
  }
  size_t at = 4;
  for (uint32_t i = 0; i < count; ++i) {
    if (n - at < 4 || n - at - 4 < get32(p + at)) {
      *why = "record " + std::to_string(i) + " of a progress table of " + std::to_string(count) +
             " records runs past its end (" + std::to_string(n) + " bytes)";
      out->clear();
      return false;
    }
    const size_t len = get32(p + at);
    out->emplace_back(p + at + 4, p + at + 4 + len);
    at += 4 + len;
  }
  if (at != n) {
    *why = "a progress table of " + std::to_string(count) + " records has " + std::to_string(n - at) +
           " bytes left over";
    out->clear();
    return false;
  }
  return true;
}

void StateServer::publish_own_progress(uint64_t peer_id, Bytes record) {
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->own_progress = {peer_id, std::move(record)};
}

void StateServer::publish_progress(std::vector<std::pair<uint64_t, Bytes>> records) {
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->progress = std::move(records);
}

// The pushed record's length, then its bytes, all before the challenge
// (the client sends them with its request), within the same idle timeout.
bool StateServer::Impl::read_push(Pending &p, Clock::time_point now) {
  const bool have_len = p.push_got >= sizeof p.push_len;
  const size_t want = have_len ? sizeof p.push_len + p.push.size() : sizeof p.push_len;
  uint8_t *to = have_len ? p.push.data() + (p.push_got - sizeof p.push_len) : p.push_len + p.push_got;
  ssize_t r = ::recv(p.fd.get(), to, want - p.push_got, MSG_DONTWAIT);
  if (r > 0) p.push_got += size_t(r);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    emit(log, Level::debug, "state server: " + p.peer + " left while pushing its record");
    return true;
  }
  if (p.push_got < want) return false;
  if (!have_len) {
    const uint32_t len = get32(p.push_len);
    const bool oob = (get16(p.buf + 6) & kStateFlagOob) != 0;
    const uint32_t most = oob ? kMaxPushedOobBytes : kMaxPushedProgressBytes;
    if (len == 0 || len > most) {
      guard.reject(p.addr, Rejection::wrong_request,
                   p.peer + " pushed " + (oob ? "an oob part" : "a progress record") + " of " + std::to_string(len) +
                       " bytes (1 to " + std::to_string(most) + ")",
                   now);
      answer(p.fd.get(), StateStatus::bad_request);
      return true;
    }
    p.push.resize(len);
    return read_push(p, now);  // its bytes usually came with the length
  }
  p.pushing = false;
  return after_request(p, now);
}

uint64_t StateServer::progress_served() const { return impl_->progress_served.load(); }

void StateServer::set_progress_push(std::function<void(Bytes)> handler) {
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->progress_push = std::move(handler);
}

uint64_t StateServer::progress_pushed() const { return impl_->progress_pushed.load(); }

std::shared_ptr<server_detail::Snapshot> StateServer::Impl::progress_snapshot(int64_t key) {
  const int level = int(uint64_t(key) >> 32);  // checked by check_request
  const uint32_t shard = uint32_t(uint64_t(key) & 0xffffffffu);
  auto snap = std::make_shared<Snapshot>();
  snap->keyed = keys != nullptr;
  {
    // Only the key's records: a reader of one shard gets what a DHT read
    // of its key would bring, not the whole swarm's.
    std::lock_guard<std::mutex> g(m);
    std::vector<const Bytes *> mine;
    if (!own_progress.second.empty() && shard_of(own_progress.first, level) == shard)
      mine.push_back(&own_progress.second);
    for (const auto &[id, bytes] : progress)
      if (shard_of(id, level) == shard) mine.push_back(&bytes);
    snap->bytes = encode_progress_table(mine);
  }
  return snap;
}

std::optional<std::vector<Bytes>> fetch_progress(const std::string &host, uint16_t port, uint64_t run, int level,
                                                 uint32_t shard, std::chrono::milliseconds timeout, std::string *why,
                                                 const std::optional<loom_key::SwarmKey> &key,
                                                 uint64_t *wire_bytes, const Bytes *push) {
  if (level < 0 || level > kMaxShardLevel || uint64_t(shard) >= (uint64_t(1) << level)) {
    *why = "no progress key at level " + std::to_string(level) + ", shard " + std::to_string(shard);
    return std::nullopt;
  }
  const Donor d{0, host, port, 0};
  std::unique_ptr<StateKeys> keys;
  if (key) keys = std::make_unique<StateKeys>(*key);
  const int64_t packed = int64_t((uint64_t(level) << 32) | shard);
  auto got = try_donor(d, run, packed, Clock::now() + timeout, timeout, nullptr, why, kStateFlagProgress, keys.get(),
                       nullptr, nullptr, 0, nullptr, push);
  if (!got) return std::nullopt;
  if (wire_bytes) *wire_bytes = got->bytes.size();
  std::vector<Bytes> out;
  if (!decode_progress_table(got->bytes.data(), got->bytes.size(), &out, why)) return std::nullopt;
  return out;
}

}  // namespace loom_collab
