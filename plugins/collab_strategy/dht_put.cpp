// SPDX-License-Identifier: Apache-2.0
// SwarmDht's puts (dht.h): the envelope (dht.cpp's opening comment), the
// expiry OpenDHT enforces through a backdated `created`, puts kept while the
// node knows no peer, and a put retried while unconfirmed sent once.
#include "dht.h"

#include "dht_impl.h"
#include "dht_value.h"
#include "seal.h"

#include <opendht/dhtrunner.h>

#include <map>
#include <mutex>

namespace loom_collab {
namespace {

using namespace std::chrono;
using namespace swarm_value;
using namespace dht_detail;

// How long a put may stay unconfirmed before the same value is sent afresh
// (put_now): OpenDHT ends a put once each target node acked or expired.
constexpr auto kPutReissueAfter = seconds(5);

}  // namespace

// A node that starts searches while it knows no peer never recovers in
// OpenDHT 2.4: its failed searches keep it from taking in the peers that
// bootstrap from it later (measured: a seed alone for 0.8 s stayed at zero
// good nodes). So while alone, puts wait in `pending` and gets answer empty;
// the first operation after a peer appears sends what waited.
bool SwarmDht::put(const std::string &key, uint64_t value_id, const Bytes &value, std::chrono::seconds ttl,
                   std::chrono::milliseconds timeout, std::chrono::seconds expiry_grain) {
  if (ttl <= seconds(0)) {
    impl_->debug("DHT put under " + key + ": ttl must be positive");
    return false;
  }
  if (ttl > kMaxTtl) ttl = duration_cast<seconds>(kMaxTtl);
  const int64_t now = now_ms(), ttl_ms = duration_cast<milliseconds>(ttl).count();
  int64_t expiry_ms = now + ttl_ms;
  if (const int64_t grain = duration_cast<milliseconds>(expiry_grain).count(); grain > 0) {
    const int64_t rounded = (expiry_ms + grain - 1) / grain * grain;
    // Never past the type's expiration, which every node enforces.
    if (rounded - now <= duration_cast<milliseconds>(kMaxTtl).count()) expiry_ms = rounded;
  }
  if (good_nodes() == 0) {
    std::lock_guard<std::mutex> lock(impl_->pending_mu);
    impl_->pending[{key, value_id}] = Impl::Pending{value, expiry_ms};
    impl_->debug("DHT put under " + key + ": no peer known yet (kept until one is)");
    return false;
  }
  flush_pending();
  return put_now(key, value_id, value, expiry_ms, timeout);
}

void SwarmDht::flush_pending() {
  std::map<std::pair<std::string, uint64_t>, Impl::Pending> due;
  {
    std::lock_guard<std::mutex> lock(impl_->pending_mu);
    due.swap(impl_->pending);
  }
  // A second at least still to live, as a put's ttl is.
  const int64_t now = now_ms();
  for (auto &[where, p] : due)
    if (p.expiry_ms - now >= 1000) put_now(where.first, where.second, p.value, p.expiry_ms, milliseconds(0));
}

void SwarmDht::send_put(const std::string &key, uint64_t value_id, const Bytes &value, int64_t expiry_ms,
                        const std::shared_ptr<dht_detail::Waiter> &w) {
  const dht::InfoHash at = impl_->where(key);
  dht::Blob data(kEnvelope);
  data[0] = impl_->sealer ? kSealedVersion : kEnvelopeVersion;
  store64(data.data() + 1, static_cast<uint64_t>(expiry_ms));
  store64(data.data() + 9, next_stamp());
  if (impl_->sealer) {
    const auto ad = associated(data.data(), at);
    const Bytes sealed = impl_->sealer->seal(value.data(), value.size(), ad.data(), ad.size());
    data.insert(data.end(), sealed.begin(), sealed.end());
  } else {
    data.insert(data.end(), value.begin(), value.end());
  }
  auto v = std::make_shared<dht::Value>(kTypeId, std::move(data), value_id ^ kIdMask);

  {
    std::lock_guard<std::mutex> lock(impl_->ops_mu);
    ++impl_->ops_of(key).puts;
  }
  // OpenDHT sends `created` truncated to whole seconds: 1 ms past the
  // intended second keeps a whole-second expiry (expiry_grain) from
  // truncating to the second before on a clock read's jitter.
  const auto left = milliseconds(expiry_ms - now_ms() + 1);
  const auto created = dht::clock::now() + left - kMaxTtl;
  impl_->runner.put(
      at, v,
      [w](bool ok, const std::vector<std::shared_ptr<dht::Node>> &) { w->finish(ok); }, created, false);
}

bool SwarmDht::put_now(const std::string &key, uint64_t value_id, const Bytes &value, int64_t expiry_ms,
                       std::chrono::milliseconds timeout) {
  if ((value_id ^ kIdMask) == dht::Value::INVALID_ID) {
    impl_->debug("DHT put under " + key + ": value id " + std::to_string(value_id) + " is reserved");
    return false;
  }
  const size_t overhead = kEnvelope + (impl_->sealer ? Sealer::kOverhead : 0);
  if (value.size() + overhead > dht::MAX_VALUE_SIZE) {
    impl_->debug("DHT put under " + key + ": " + std::to_string(value.size()) + " bytes is above OpenDHT's limit");
    return false;
  }
  // The same value put again while its put is still unconfirmed waits for
  // that put instead of sending another. Callers retry a put that did not
  // confirm within their timeout (a join every 300 ms), and OpenDHT
  // confirms only once every target node acked: seconds when one of them
  // was just killed. Each retry was a new edit (the envelope's stamp),
  // stored again on every node and pushed again to every watcher: 8 peers
  // under churn put 2.3 joins a round. A put still unconfirmed after
  // kPutReissueAfter is sent afresh.
  std::shared_ptr<Waiter> w;
  bool send = false;
  {
    const auto now = steady_clock::now();
    std::lock_guard<std::mutex> lock(impl_->put_flights_mu);
    for (auto it = impl_->put_flights.begin(); it != impl_->put_flights.end();) {
      const bool over = it->second.waiter->finished() || now - it->second.started >= kPutReissueAfter;
      it = over ? impl_->put_flights.erase(it) : std::next(it);
    }
    auto &flight = impl_->put_flights[{key, value_id}];
    if (flight.waiter && flight.value == value) {
      w = flight.waiter;
    } else {
      w = std::make_shared<Waiter>();
      flight = Impl::PutFlight{value, w, now};
      send = true;
    }
  }
  if (send) send_put(key, value_id, value, expiry_ms, w);
  bool ok = false;
  if (!w->wait(timeout, &ok)) {
    if (timeout.count() > 0)  // 0: the caller chose not to wait
      impl_->debug("DHT put under " + key + ": no node confirmed within " + std::to_string(timeout.count()) + " ms");
    return false;
  }
  if (!ok) impl_->debug("DHT put under " + key + ": no node accepted it (kept locally)");
  return ok;
}

}  // namespace loom_collab
