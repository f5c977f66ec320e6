// SPDX-License-Identifier: Apache-2.0
#include "group_comm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "dht_value.h"

namespace loom_collab {
namespace {

int64_t ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return std::max<int64_t>(1, left);
}

}  // namespace

loom_status GroupComm::open(const GroupRecord &group, uint64_t me, Clock::time_point deadline, std::string *why) {
  close(false);
  auto it = std::find(group.members.begin(), group.members.end(), me);
  if (it == group.members.end()) {
    *why = "this peer is not a member of the group";
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  rank_ = static_cast<int32_t>(it - group.members.begin());
  size_ = static_cast<int32_t>(group.members.size());
  group_hash_ = group.group_hash();
  part_ = group.part;
  epoch_ = group.epoch;
  attempt_ = group.attempt;
  me_ = me;
  members_ = group.members;
  opened_ms_ = swarm_value::now_ms();
  left_seen_ms_ = -1;
  left_checked_ms_ = 0;
  servers_.assign(group.members.size(), {});
  oob_error_.clear();
  loom_oob_v1 oob{sizeof(loom_oob_v1), this, &GroupComm::oob_allgather};
  char name[64];
  std::snprintf(name, sizeof name, "collab-e%lld-a%u", static_cast<long long>(group.epoch), group.attempt);
  loom_comm_config_v1 config{};
  config.struct_size = sizeof config;
  config.rank = rank_;
  config.size = size_;
  config.device_type = LOOM_DEVICE_CPU;
  config.oob = &oob;
  config.timeout_ms = ms_until(deadline);
  config.name = name;
  loom_comm *comm = nullptr;
  loom_status s = vt_->comm_create(instance_, &config, &comm);
  if (s != LOOM_OK) {
    *why = std::string("building the group's communicator failed (") + loom_status_name(s) + "): " +
           (oob_error_.empty() ? vt_->last_error(instance_) : oob_error_);
    return s;
  }
  comm_ = comm;
  adopted_ = false;
  return LOOM_OK;
}

int32_t GroupComm::first_server() const {
  for (size_t r = 0; r < servers_.size(); ++r)
    if (servers_[r].second != 0 && !servers_[r].first.empty()) return int32_t(r);
  return -1;
}

loom_status GroupComm::adopt(const GroupRecord &group, uint64_t me, std::string *why) {
  if (comm_ == nullptr) {
    *why = "the kept communicator is closed";
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  if (group.members != members_ || me != me_) {
    *why = "the group's members are not the kept communicator's";
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  group_hash_ = group.group_hash();
  part_ = group.part;
  epoch_ = group.epoch;
  attempt_ = group.attempt;
  adopted_ = true;
  return LOOM_OK;
}

namespace {
std::atomic<uint64_t> g_payload_bytes{0};
std::atomic<uint64_t> g_wire_sent{0}, g_wire_received{0};
std::atomic<bool> g_wire_counted{false};
}  // namespace

uint64_t GroupComm::payload_bytes() { return g_payload_bytes.load(); }

bool GroupComm::wire_bytes(uint64_t *sent, uint64_t *received) {
  *sent = g_wire_sent.load();
  *received = g_wire_received.load();
  return g_wire_counted.load();
}

loom_status GroupComm::allreduce(void *buf, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                                 Clock::time_point deadline, std::string *why) {
  if (comm_ == nullptr) return no_comm(why);
  g_payload_bytes += count * loom_dtype_size(dtype);
  loom_request *request = nullptr;
  const loom_status posted = vt_->allreduce(comm_, buf, buf, count, dtype, op, &request);
  return complete(posted, request, deadline, "allreduce", why);
}

loom_status GroupComm::allreduce_scaled(const float *send, float *recv, uint64_t count, double scale,
                                        Clock::time_point deadline, std::string *why) {
  if (comm_ == nullptr) return no_comm(why);
  g_payload_bytes += count * sizeof(float);
  loom_request *request = nullptr;
  const loom_status posted = vt_->allreduce_scaled(comm_, send, recv, count, LOOM_DTYPE_F32, scale, &request);
  return complete(posted, request, deadline, "allreduce", why);
}

loom_status GroupComm::alltoall(const void *send, void *recv, uint64_t bytes, Clock::time_point deadline, std::string *why) {
  if (comm_ == nullptr) return no_comm(why);
  g_payload_bytes += bytes * uint64_t(size_);
  loom_request *request = nullptr;
  const loom_status posted = vt_->alltoall(comm_, send, recv, bytes, LOOM_DTYPE_U8, &request);
  return complete(posted, request, deadline, "alltoall", why);
}

loom_status GroupComm::allgather(const void *send, void *recv, uint64_t bytes, Clock::time_point deadline, std::string *why) {
  if (comm_ == nullptr) return no_comm(why);
  g_payload_bytes += bytes;
  loom_request *request = nullptr;
  const loom_status posted = vt_->allgather(comm_, send, recv, bytes, LOOM_DTYPE_U8, &request);
  return complete(posted, request, deadline, "allgather", why);
}

loom_status GroupComm::post_block(const Block &b, bool send, loom_request **request, std::string *why) {
  if (comm_ == nullptr) return no_comm(why);
  *request = nullptr;
  loom_status s;
  if (send) {
    g_payload_bytes += b.bytes;
    s = vt_->send(comm_, b.data, b.bytes, LOOM_DTYPE_U8, b.peer, request);
  } else {
    s = vt_->recv(comm_, b.data, b.bytes, LOOM_DTYPE_U8, b.peer, request);
  }
  if (s != LOOM_OK) {
    *request = nullptr;
    *why = std::string("posting a ") + (send ? "send" : "receive") + " failed (" + loom_status_name(s) +
           "): " + error_text();
  }
  return s;
}

loom_status GroupComm::test_block(loom_request **request, bool *done, std::string *why) {
  int32_t finished = 0;
  const loom_status s = vt_->test(*request, &finished);
  *done = s == LOOM_OK && finished;
  if (s != LOOM_OK) *why = std::string("a block failed (") + loom_status_name(s) + "): " + error_text();
  if (*done) {
    vt_->request_free(*request);
    *request = nullptr;
  }
  return s;
}

void GroupComm::abandon_blocks(std::vector<loom_request *> *requests) {
  if (comm_) vt_->comm_abort(comm_);  // the plugin frees requests once nothing touches their buffers
  for (loom_request *&r : *requests) {
    if (r) vt_->request_free(r);
    r = nullptr;
  }
  close(true);
}

loom_status GroupComm::barrier(Clock::time_point deadline, std::string *why) {
  if (comm_ == nullptr) return no_comm(why);
  loom_request *request = nullptr;
  const loom_status posted = vt_->barrier(comm_, &request);  // before request is read: two statements
  return complete(posted, request, deadline, "waiting for the group", why);
}

// The communicator's own message where the plugin keeps one (ABI 1.7): it
// cannot be another thread's.
const char *GroupComm::error_text() const {
  if (comm_ && vt_->struct_size >= LOOM_COLLECTIVE_V1_7_SIZE && vt_->comm_last_error) return vt_->comm_last_error(comm_);
  return vt_->last_error(instance_);
}

loom_status GroupComm::no_comm(std::string *why) {
  *why = "no communicator";
  return LOOM_ERR_INVALID_ARGUMENT;
}

// Waits for a posted operation by deadline. A failure aborts first (the
// plugin frees the request only once nothing touches the buffers) and then
// closes the communicator.
loom_status GroupComm::complete(loom_status posted, loom_request *request, Clock::time_point deadline,
                                const char *what, std::string *why) {
  loom_status s = posted;
  if (s == LOOM_OK) {
    std::string gone;
    s = wait_for(request, deadline, &gone);
    if (s != LOOM_OK) {
      *why = std::string(what) + " failed (" + loom_status_name(s) + "): " + (gone.empty() ? error_text() : gone);
      vt_->comm_abort(comm_);
    }
    vt_->request_free(request);
  } else {
    *why = std::string("posting (") + what + ") failed (" + loom_status_name(s) + "): " + error_text();
  }
  if (s != LOOM_OK) close(true);
  return s;
}

bool GroupComm::member_left(std::string *gone) {
  if (!left_) return false;
  const int64_t now = swarm_value::now_ms();
  if (left_seen_ms_ < 0) {
    // Reads the peer's table under its lock: not at every poll of a loop.
    if (now - left_checked_ms_ < 50) return false;
    left_checked_ms_ = now;
    for (size_t r = 0; r < members_.size(); ++r)
      if (members_[r] != me_ && left_(members_[r], opened_ms_)) {
        left_rank_ = r;
        left_seen_ms_ = now;
        break;
      }
    return false;
  }
  if (now - left_seen_ms_ < kLeftGraceMs) return false;
  char text[200];
  std::snprintf(text, sizeof text,
                "member %d (peer %llu) left the swarm (its goodbye was read %lld ms ago) without finishing it",
                int(left_rank_), static_cast<unsigned long long>(members_[left_rank_]),
                static_cast<long long>(now - left_seen_ms_));
  *gone = text;
  return true;
}

loom_status GroupComm::wait_for(loom_request *request, Clock::time_point deadline, std::string *gone) {
  if (!left_) return vt_->wait(request, ms_until(deadline));
  // Slices short against a round's seconds, long against a wait's wake-up.
  constexpr int64_t kSliceMs = 100;
  for (;;) {
    const loom_status s = vt_->wait(request, std::min(kSliceMs, ms_until(deadline)));
    if (s != LOOM_ERR_TIMEOUT || Clock::now() >= deadline) return s;
    if (member_left(gone)) return LOOM_ERR_PEER_FAILED;
  }
}

void GroupComm::close(bool abort) {
  if (comm_ == nullptr) return;
  if (abort) vt_->comm_abort(comm_);
  if (vt_->struct_size >= LOOM_COLLECTIVE_V1_11_SIZE && vt_->comm_stats) {
    loom_comm_stats_v1 stats{};
    stats.struct_size = sizeof stats;
    if (vt_->comm_stats(comm_, &stats) == LOOM_OK) {
      g_wire_sent += stats.bytes_sent;
      g_wire_received += stats.bytes_received;
      g_wire_counted = true;
    }
  }
  vt_->comm_destroy(comm_);
  comm_ = nullptr;
}

loom_status GroupComm::oob_allgather(void *user, const void *send, size_t len, void *recv, int64_t timeout_ms) noexcept {
  try {
    return static_cast<GroupComm *>(user)->exchange(send, len, recv, timeout_ms);
  } catch (const std::exception &e) {
    static_cast<GroupComm *>(user)->oob_error_ = std::string("group exchange: ") + e.what();
    return LOOM_ERR_INTERNAL;
  }
}

namespace {
std::atomic<uint64_t> g_hub_exchanges{0}, g_dht_exchanges{0}, g_hub_failed{0}, g_failed_exchanges{0};
// How long a hub may hold one reply: a member asks again after it, so a
// hub that died while holding costs at most this before the next try fails.
constexpr int64_t kHubHoldMs = 2000;
// A reply that came back incomplete before its hold ended (a part of
// another signer made the hub's count whole): the next ask waits this.
constexpr auto kHubRetry = std::chrono::milliseconds(100);
// After its half, a member asks the hub between its DHT reads, each ask
// held this long at most.
constexpr int64_t kHubAskMs = 200;
// What a hub's answer may take past its hold: a loaded machine's scheduling
// (64 peers on 2 cores), the connection and the table. Never into the
// exchange's last quarter, which the DHT keeps: a hub that takes the
// connection and never answers (a stalled server, a firewall dropping it)
// held every member past its deadline when the ask could run 3 s over a
// 2 s hold.
constexpr auto kHubSlack = std::chrono::seconds(3);

std::chrono::milliseconds ask_wait(std::chrono::milliseconds hold, Clock::time_point latest) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(latest - Clock::now());
  return std::max(hold, std::min<std::chrono::milliseconds>(hold + kHubSlack, left));
}
}  // namespace

GroupComm::ExchangeCounts GroupComm::exchange_counts() {
  return {g_hub_exchanges.load(), g_dht_exchanges.load(), g_hub_failed.load(), g_failed_exchanges.load()};
}

std::string GroupComm::exchange_text() {
  const ExchangeCounts c = exchange_counts();
  return "built " + std::to_string(c.hub + c.dht) + " communicators: " + std::to_string(c.hub) +
         " exchanged addresses through their group's hub, " + std::to_string(c.dht) + " through the DHT; " +
         std::to_string(c.failed) + " exchanges failed; " + std::to_string(c.hub_failed) +
         " went on to the DHT after the hub failed";
}

bool GroupComm::through_hub(const Bytes &value, Clock::time_point until, Clock::time_point latest,
                            const std::function<bool(const std::vector<Bytes> &)> &take,
                            const std::function<bool()> &complete, std::string *failed, bool *reachable) {
  while (Clock::now() < until && !(cancel_ && cancel_->load())) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    const auto hold = std::chrono::milliseconds(std::clamp<int64_t>(left, 1, kHubHoldMs));
    const auto asked = Clock::now();
    auto parts = hub_(value, hold, ask_wait(hold, latest), failed);
    if (!parts) {
      *reachable = false;
      return false;
    }
    take(*parts);
    if (complete()) return true;
    if (Clock::now() - asked < hold) std::this_thread::sleep_until(std::min(until, Clock::now() + kHubRetry));
  }
  *failed = "the hub did not bring every part within half the exchange's time";
  return false;
}

// Brings every member's part: through the group's hub when it has one
// (oob_hub.h), else or after the hub's half by publishing this member's part
// under the group's hash and watching the key (the hub still asked between
// reads). Parts of another group hash, size or length are ignored (they
// belong to members that disagree about the group). No ask of the hub
// outlasts the deadline (ask_wait).
loom_status GroupComm::exchange(const void *send, size_t len, void *recv, int64_t timeout_ms) {
  if (len > kMaxOobPayload) {
    oob_error_ = "the collective's exchange payload of " + std::to_string(len) + " bytes exceeds " +
                 std::to_string(kMaxOobPayload);
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  OobRecord mine;
  mine.group_hash = group_hash_;
  mine.rank = static_cast<uint32_t>(rank_);
  mine.size = static_cast<uint32_t>(size_);
  mine.payload.assign(static_cast<const uint8_t *>(send), static_cast<const uint8_t *>(send) + len);
  mine.state_host = own_host_;
  mine.state_port = own_port_;
  const Bytes value = encode(run_, mine, *identity_);
  const std::string key = oob_key(run_id_, epoch_, attempt_, part_);
  const uint64_t value_id = round_value_id(me_, epoch_, attempt_);
  const auto ttl = std::chrono::seconds(timeout_ms / 1000 + 5);
  std::vector<bool> have(static_cast<size_t>(size_), false);
  auto *out = static_cast<uint8_t *>(recv);
  auto take = [&](const std::vector<Bytes> &raws) {
    bool news = false;
    for (const auto &raw : raws) {
      std::string reason;
      auto r = decode_oob(run_, raw.data(), raw.size(), &reason);
      if (!r || r->group_hash != group_hash_ || r->size != uint32_t(size_) || r->payload.size() != len) continue;
      // Only the member at that rank may speak for it: another's part (a
      // forged address) would route the round through an outsider.
      if (r->signer != members_[r->rank]) continue;
      if (!have[r->rank]) {
        std::memcpy(out + size_t(r->rank) * len, r->payload.data(), len);
        servers_[r->rank] = {r->state_host, r->state_port};
        have[r->rank] = true;
        news = true;
      }
    }
    return news;
  };
  auto complete = [&] { return std::all_of(have.begin(), have.end(), [](bool b) { return b; }); };
  // The hub first, for half the time: every member that reaches it gets
  // every part in one reply. One that cannot reach it goes to the DHT at
  // once; the others follow when their half ends, keeping what came, and
  // go on asking the hub too: a member that learnt of the group late
  // starts at the hub, which still holds every early part, and its own
  // part reaches the others only there.
  std::string hub_failed;
  bool hub_reachable = hub_ != nullptr;
  if (hub_) {
    if (through_hub(value, Clock::now() + std::chrono::milliseconds(timeout_ms / 2),
                    deadline - std::chrono::milliseconds(timeout_ms / 4), take, complete, &hub_failed, &hub_reachable)) {
      ++g_hub_exchanges;
      return LOOM_OK;
    }
    ++g_hub_failed;
  }
  bool published = false;
  Clock::time_point last_put{};
  // The members' parts come through a watch of the key (dht.h); a get
  // only when it brought nothing new for a while, that wait doubling from
  // 250 ms up to a second, so that a part whose push was lost still counts.
  auto watch = dht_->watch(key);
  uint64_t seen = 0;
  std::chrono::milliseconds quiet(250);
  Clock::time_point last_news = Clock::now();
  Clock::time_point next_hub_ask = Clock::now();
  for (;;) {
    // The put waits 50 ms at most: a node that died (a peer killed a moment
    // ago, still in the routing table) holds its confirmation until it
    // times out. An unconfirmed put goes on in the background and is
    // repeated at most once a second.
    if (!published && Clock::now() - last_put >= std::chrono::seconds(1)) {
      last_put = Clock::now();
      published = dht_->put(key, value_id, value, ttl, std::chrono::milliseconds(std::min<int64_t>(50, timeout_ms)),
                            kRoundExpiryGrain);
    }
    bool news = false;
    std::vector<Bytes> pushed;
    if (watch->news(&seen, &pushed)) {
      news = take(pushed);
    } else if (Clock::now() - last_news >= quiet) {
      news = take(dht_->get(key, std::chrono::milliseconds(200)));
      if (!news) quiet = std::min(quiet * 2, std::chrono::milliseconds(1000));
      last_news = Clock::now();
    }
    if (hub_reachable && !complete() && Clock::now() >= next_hub_ask) {
      const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      std::string failed;
      const auto hold = std::chrono::milliseconds(std::clamp<int64_t>(left, 1, kHubAskMs));
      auto parts = hub_(value, hold, ask_wait(hold, deadline), &failed);
      if (parts)
        news = take(*parts) || news;
      else
        hub_reachable = false;
      next_hub_ask = Clock::now() + kHubRetry;
    }
    if (news) last_news = Clock::now();
    if (complete()) {
      ++g_dht_exchanges;
      return LOOM_OK;
    }
    if (cancel_ && cancel_->load()) {
      oob_error_ = "the round was abandoned while its members exchanged addresses";
      ++g_failed_exchanges;
      return LOOM_ERR_ABORTED;
    }
    if (Clock::now() >= deadline) {
      size_t missing = static_cast<size_t>(std::count(have.begin(), have.end(), false));
      oob_error_ = "the group exchange timed out after " + std::to_string(timeout_ms) + " ms: " +
                   std::to_string(missing) + " of " + std::to_string(size_) + " members never published" +
                   (published ? "" : " (and no node confirmed storing this peer's own part)") +
                   (hub_ ? "; through the hub first: " + hub_failed : std::string());
      ++g_failed_exchanges;
      return LOOM_ERR_TIMEOUT;
    }
    watch->wait(seen, std::chrono::milliseconds(5));
  }
}

}  // namespace loom_collab
