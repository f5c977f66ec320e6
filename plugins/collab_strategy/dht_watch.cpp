// SPDX-License-Identifier: Apache-2.0
// SwarmDht::Watch, a standing read over OpenDHT's listen (dht.h says what
// it costs against a poll and what it does not promise), and the node's
// request counts that show it.
#include "dht_impl.h"

#include <future>

namespace loom_collab {

using namespace swarm_value;
using namespace dht_detail;

// Shared with the listen callback, which OpenDHT may call on its thread
// after the watch is gone (a cancel is queued, not immediate).
struct SwarmDht::Watch::State {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool cancelled = false;
  uint64_t version = 0;
  uint64_t unopened = 0;
  HeldValues newest;
  dht::InfoHash at;
  std::shared_future<size_t> token;
};

SwarmDht::Watch::Watch(SwarmDht *dht, std::string key)
    : dht_(dht), key_(std::move(key)), state_(std::make_shared<State>()) {
  state_->at = dht_->impl_->where(key_);
  start_if_connected();
}

SwarmDht::Watch::~Watch() {
  std::shared_future<size_t> token;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancelled = true;
    if (!state_->started) return;
    token = state_->token;
  }
  dht_->impl_->runner.cancelListen(state_->at, token);
}

// A listen started while the node knows no peer would start a search that
// never recovers in OpenDHT 2.4 (dht.cpp's put says why): wait for one.
void SwarmDht::Watch::start_if_connected() {
  std::lock_guard<std::mutex> starting(start_mu_);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->started) return;
  }
  if (dht_->good_nodes() == 0) return;
  Impl *impl = dht_->impl_.get();
  impl->watches_started.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(impl->ops_mu);
    ++impl->ops_of(key_).watches;
  }
  std::weak_ptr<State> weak = state_;
  const Sealer *sealer = impl->sealer.get();  // outlives every callback: the destructor joins the runner first
  const dht::InfoHash at = state_->at;
  auto future = impl->runner.listen(
      at,
      [weak, sealer, at](const std::vector<std::shared_ptr<dht::Value>> &values, bool expired) {
        auto s = weak.lock();
        if (!s) return false;
        if (expired) return true;  // values() drops them by their own expiry
        const int64_t now = now_ms();
        bool changed = false;
        {
          std::lock_guard<std::mutex> lock(s->mu);
          if (s->cancelled) return false;
          for (const auto &v : values) {
            if (!v) continue;
            const Opened o = keep_newest(&s->newest, *v, sealer, at, now, s->version + 1);
            if (o == Opened::unopened) ++s->unopened;
            changed = changed || o == Opened::ok;
          }
          if (changed) ++s->version;
        }
        if (changed) s->cv.notify_all();
        return true;
      },
      dht::Value::TypeFilter(kTypeId));
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->token = future.share();
  state_->started = true;
}

std::vector<Bytes> SwarmDht::Watch::values() { return values_since(0); }

std::vector<Bytes> SwarmDht::Watch::values_since(uint64_t after) {
  start_if_connected();
  const int64_t now = now_ms();
  std::vector<Bytes> out;
  uint64_t unopened = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const auto &entry : state_->newest)
      if (entry.second.version > after && entry.second.expiry_ms > now) out.push_back(entry.second.record);
    std::swap(unopened, state_->unopened);
  }
  if (unopened) dht_->impl_->count_unopened(key_, unopened);
  return out;
}

bool SwarmDht::Watch::news(uint64_t *seen, std::vector<Bytes> *out) {
  const uint64_t now = version();  // before the values: one pushed between comes again next time, never lost
  if (now == *seen) return false;
  *out = values_since(*seen);
  *seen = now;
  return true;
}

uint64_t SwarmDht::Watch::version() {
  start_if_connected();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->version;
}

uint64_t SwarmDht::Watch::wait(uint64_t seen, std::chrono::milliseconds timeout) {
  start_if_connected();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait_for(lock, timeout, [&] { return state_->version > seen; });
  return state_->version;
}

std::unique_ptr<SwarmDht::Watch> SwarmDht::watch(const std::string &key) {
  return std::unique_ptr<Watch>(new Watch(this, key));
}

uint64_t SwarmDht::watches_started() const { return impl_->watches_started.load(); }

SwarmDht::Requests SwarmDht::requests_sent() {
  const auto now = impl_->runner.getNodeMessageStats(false);  // ping, find, get, listen, put
  std::lock_guard<std::mutex> lock(impl_->requests_mu);
  Requests &r = impl_->requests;
  if (now.size() >= 5) {
    r.ping += now[0];
    r.find += now[1];
    r.get += now[2];
    r.listen += now[3];
    r.put += now[4];
  }
  return r;
}

}  // namespace loom_collab
