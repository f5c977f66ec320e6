// SPDX-License-Identifier: Apache-2.0
// A group's hub (oob_hub.h), the state server's side of an oob request
// (state_transfer.h's kStateFlagOob) and the member's.
#include "oob_hub.h"

#include <algorithm>

#include "seal.h"
#include "state_donor.h"
#include "state_server_impl.h"

namespace loom_collab {

OobHub::OobHub(uint64_t run, const std::optional<loom_key::SwarmKey> &key) : run_(run) {
  if (key) sealer_ = std::make_unique<Sealer>(*key);
}

OobHub::~OobHub() = default;

// Bound to the run and to this use, so that a sealed part is never taken
// for a progress push, a DHT value or another run's.
Bytes OobHub::ad() const { return use_ad("loom oob part", run_); }

Bytes OobHub::wrap(const Bytes &record) const {
  if (!sealer_) return record;
  const Bytes a = ad();
  return sealer_->seal(record.data(), record.size(), a.data(), a.size());
}

bool OobHub::file(const Bytes &record, GroupKey *key, std::string *why) {
  auto r = decode_oob(run_, record.data(), record.size(), why);
  if (!r) return false;
  const auto now = Clock::now();
  for (auto it = groups_.begin(); it != groups_.end();)
    it = now - it->second.touched > kKeep ? groups_.erase(it) : std::next(it);
  *key = {r->group_hash, r->size};
  auto it = groups_.find(*key);
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxGroups) {
      auto oldest = std::min_element(groups_.begin(), groups_.end(), [](const auto &a, const auto &b) {
        return a.second.touched < b.second.touched;
      });
      groups_.erase(oldest);
    }
    it = groups_.emplace(*key, Group{}).first;
    it->second.size = r->size;
    it->second.ranks.assign(r->size, false);
    it->second.missing = r->size;
  }
  Group &g = it->second;
  g.touched = now;
  const auto part = std::make_pair(r->rank, r->signer);
  const bool fresh = !g.parts.count(part);
  if (fresh) {
    const auto signers = std::count_if(g.parts.begin(), g.parts.end(),
                                       [&](const auto &p) { return p.first.first == r->rank; });
    if (size_t(signers) >= kMaxSignersPerRank) {
      *why = "rank " + std::to_string(r->rank) + " of group " + hex64(r->group_hash) + " already has " +
             std::to_string(signers) + " parts from different signers";
      return false;
    }
  }
  g.parts[part] = record;  // a member sends its part again with each request: the same bytes
  if (!g.ranks[r->rank]) {
    g.ranks[r->rank] = true;
    --g.missing;
  }
  parts_ += fresh;
  return true;
}

std::vector<Bytes> OobHub::wait(const GroupKey &key, std::chrono::milliseconds hold,
                                const std::function<bool()> &stop) {
  const auto until = Clock::now() + hold;
  std::unique_lock<std::mutex> g(m_);
  for (;;) {
    auto it = groups_.find(key);
    if (it == groups_.end()) return {};  // pushed out by newer groups
    if (it->second.missing == 0 || Clock::now() >= until || (stop && stop())) {
      std::vector<Bytes> out;
      for (const auto &[_, bytes] : it->second.parts) out.push_back(bytes);
      return out;
    }
    // Woken by every part filed; stop() is looked at every 50 ms.
    filed_.wait_until(g, std::min(until, Clock::now() + std::chrono::milliseconds(50)));
  }
}

std::optional<Bytes> OobHub::serve(const Bytes &pushed, std::chrono::milliseconds hold,
                                   const std::function<bool()> &stop, std::string *why) {
  Bytes opened;
  const Bytes *record = &pushed;
  if (sealer_) {
    const Bytes a = ad();
    if (!sealer_->open(pushed.data(), pushed.size(), a.data(), a.size(), &opened)) {
      ++refused_;
      *why = "a part of " + std::to_string(pushed.size()) + " bytes that does not open with this swarm's key";
      return std::nullopt;
    }
    record = &opened;
  }
  if (is_grant_ask(*record)) {
    auto ask = decode_grant_ask(run_, record->data(), record->size(), why);
    auto grant = ask ? grants_.grant(*ask, why) : std::nullopt;
    if (!grant) {
      ++refused_;
      return std::nullopt;
    }
    const Bytes one = encode_grant(*grant);
    return encode_progress_table({&one});
  }
  GroupKey key;
  {
    std::lock_guard<std::mutex> g(m_);
    if (!file(*record, &key, why)) {
      ++refused_;
      return std::nullopt;
    }
  }
  filed_.notify_all();
  const std::vector<Bytes> parts = wait(key, hold, stop);
  std::vector<const Bytes *> table;
  for (const auto &p : parts) table.push_back(&p);
  return encode_progress_table(table);
}

std::vector<Bytes> OobHub::exchange(const Bytes &record, std::chrono::milliseconds hold,
                                    const std::function<bool()> &stop) {
  GroupKey key;
  std::string why;
  {
    std::lock_guard<std::mutex> g(m_);
    if (!file(record, &key, &why)) return {};  // never for this peer's own record
  }
  filed_.notify_all();
  return wait(key, hold, stop);
}

// The server's side: its handler, run on the request's own thread.
void StateServer::set_oob_handler(OobHandler handler) {
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->oob_handler = std::move(handler);
}

uint64_t StateServer::oob_served() const { return impl_->oob_served.load(); }

std::shared_ptr<server_detail::Snapshot> StateServer::Impl::oob_snapshot(Transfer &t, std::string *why) {
  OobHandler handler;
  {
    std::lock_guard<std::mutex> g(m);
    handler = oob_handler;
  }
  if (!handler) {  // checked at admission; never unset after
    *why = "this peer is no group's hub";
    return nullptr;
  }
  auto table = handler(t.push, std::chrono::milliseconds(t.min_epoch),
                       [&] { return stopping.load() || t.cancel.load(); }, why);
  if (!table) return nullptr;
  auto snap = std::make_shared<Snapshot>();
  snap->keyed = keys != nullptr;
  snap->bytes = std::move(*table);
  return snap;
}

std::optional<std::vector<Bytes>> fetch_oob(const std::string &host, uint16_t port, uint64_t run, const Bytes &push,
                                            std::chrono::milliseconds hold, std::chrono::milliseconds timeout,
                                            std::string *why, const std::optional<loom_key::SwarmKey> &key,
                                            const std::atomic<bool> *cancel) {
  if (hold.count() < 1 || hold.count() > kMaxOobHoldMs || timeout <= hold) {
    *why = "an oob hold of " + std::to_string(hold.count()) + " ms within " + std::to_string(timeout.count()) +
           " ms (1 to " + std::to_string(kMaxOobHoldMs) + " ms, and less than the timeout)";
    return std::nullopt;
  }
  const Donor d{0, host, port, 0};
  std::unique_ptr<StateKeys> keys;
  if (key) keys = std::make_unique<StateKeys>(*key);
  // The hub says nothing while it holds: the stall bound covers the hold.
  auto got = try_donor(d, run, hold.count(), std::chrono::steady_clock::now() + timeout, timeout, cancel, why, kStateFlagOob, keys.get(),
                       nullptr, nullptr, 0, nullptr, &push);
  if (!got) return std::nullopt;
  std::vector<Bytes> out;
  if (!decode_progress_table(got->bytes.data(), got->bytes.size(), &out, why)) return std::nullopt;
  return out;
}

std::optional<Grant> fetch_grant(const std::string &host, uint16_t port, uint64_t run, const Bytes &push,
                                 std::chrono::milliseconds timeout, std::string *why,
                                 const std::optional<loom_key::SwarmKey> &key) {
  auto table = fetch_oob(host, port, run, push, std::chrono::milliseconds(1), timeout, why, key, nullptr);
  if (!table) return std::nullopt;
  if (table->size() != 1) {
    *why = "the hub answered a grant ask with " + std::to_string(table->size()) + " entries, not one grant";
    return std::nullopt;
  }
  return decode_grant(table->front().data(), table->front().size(), why);
}

}  // namespace loom_collab
