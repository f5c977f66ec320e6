// SPDX-License-Identifier: Apache-2.0
// A communicator's out-of-band exchange (group_comm.h): through the group's
// hub (oob_hub.h) when it answers, through the DHT when there is none or it
// cannot be reached, and both when some members reach the hub and one does
// not. Three members in threads, each with its own DHT node on loopback, and
// a collective whose comm_create is only its exchange: each member
// contributes a slot that names its rank and checks every other slot.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include "dht_support.hpp"
#include "group_comm.h"
#include "oob_hub.h"
#include "state_transfer.h"

namespace loom_collab {
namespace {

using namespace dht_test;
using std::chrono::milliseconds;

constexpr size_t kSlot = 96;
std::atomic<int> g_bad_slots{0};

loom_status fake_create(loom_collective_ctx *, const loom_comm_config_v1 *c, loom_comm **comm) {
  std::vector<uint8_t> send(kSlot, 0), recv(kSlot * size_t(c->size), 0xee);
  std::snprintf(reinterpret_cast<char *>(send.data()), kSlot, "member at rank %d", c->rank);
  const loom_status s = c->oob->allgather(c->oob->user, send.data(), kSlot, recv.data(), c->timeout_ms);
  if (s != LOOM_OK) return s;
  for (int r = 0; r < c->size; ++r) {
    char want[kSlot] = {};
    std::snprintf(want, kSlot, "member at rank %d", r);
    if (std::memcmp(recv.data() + size_t(r) * kSlot, want, kSlot) != 0) ++g_bad_slots;
  }
  static int dummy;
  *comm = reinterpret_cast<loom_comm *>(&dummy);
  return LOOM_OK;
}
loom_status fake_destroy(loom_comm *) { return LOOM_OK; }
loom_status fake_abort(loom_comm *) { return LOOM_OK; }
const char *fake_error(loom_collective_ctx *) { return "the fake collective's exchange failed"; }

loom_collective_v1 fake_vtable() {
  loom_collective_v1 vt{};
  vt.struct_size = LOOM_COLLECTIVE_V1_0_SIZE;  // no comm_stats to ask
  vt.comm_create = fake_create;
  vt.comm_destroy = fake_destroy;
  vt.comm_abort = fake_abort;
  vt.last_error = fake_error;
  return vt;
}

// How each member reaches the hub (member 0 is the hub's own).
// absent: never builds; late: reaches the hub after the others' half;
// silent: the hub's address takes the connection and never answers (a
// stalled server, or a firewall that drops it), asked over TCP as a peer
// asks its leader's server.
enum class Route { none, hub, unreachable, absent, late, silent };

// A listening socket that never accepts: connections complete in its
// backlog, their requests are never read.
struct SilentServer {
  int fd = -1;
  uint16_t port = 0;
  SilentServer() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&a), len) != 0 || ::listen(fd, 16) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on loopback");
    port = ntohs(a.sin_port);
  }
  ~SilentServer() { ::close(fd); }
};

struct Outcome {
  std::vector<loom_status> status;
  std::vector<std::string> why;
  GroupComm::ExchangeCounts counts;  // this run's, from the process-wide counters
  double seconds = 0;
};

Outcome build(const std::vector<Route> &routes, int64_t timeout_ms) {
  static std::atomic<int64_t> epochs{100};
  const loom_collective_v1 vt = fake_vtable();
  auto nodes = connected_nodes(int(routes.size()));
  std::vector<std::unique_ptr<Identity>> ids;
  GroupRecord group;
  group.epoch = epochs++;  // a fresh oob key each run
  for (size_t i = 0; i < routes.size(); ++i) ids.push_back(std::make_unique<Identity>());
  std::sort(ids.begin(), ids.end(), [](const auto &a, const auto &b) { return a->id() < b->id(); });
  for (const auto &id : ids) group.members.push_back(id->id());
  const uint64_t run = run_hash("group-exchange-test");
  OobHub hub(run, std::nullopt);
  SilentServer silent;
  const GroupComm::ExchangeCounts before = GroupComm::exchange_counts();
  Outcome out;
  out.status.resize(routes.size());
  out.why.resize(routes.size());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < routes.size(); ++i) {
    if (routes[i] == Route::absent) continue;
    threads.emplace_back([&, i] {
      if (routes[i] == Route::late) std::this_thread::sleep_for(milliseconds(timeout_ms * 6 / 10));
      GroupComm comm(&vt, nullptr, nodes[i].get(), "group-exchange-test", run, ids[i].get());
      if (routes[i] == Route::hub && i == 0) {
        comm.set_hub([&](const Bytes &part, milliseconds hold, milliseconds, std::string *) {
          return std::optional<std::vector<Bytes>>(hub.exchange(part, hold, {}));
        });
      } else if (routes[i] == Route::hub || routes[i] == Route::late) {  // as the hub's server would answer it
        comm.set_hub([&](const Bytes &part, milliseconds hold, milliseconds, std::string *why) -> std::optional<std::vector<Bytes>> {
          auto table = hub.serve(hub.wrap(part), hold, {}, why);
          std::vector<Bytes> parts;
          if (!table || !decode_progress_table(table->data(), table->size(), &parts, why)) return std::nullopt;
          return parts;
        });
      } else if (routes[i] == Route::silent) {
        comm.set_hub([&](const Bytes &part, milliseconds hold, milliseconds wait, std::string *why) {
          return fetch_oob("127.0.0.1", silent.port, run, hub.wrap(part), hold, wait, why, std::nullopt, nullptr);
        });
      } else if (routes[i] == Route::unreachable) {
        comm.set_hub([](const Bytes &, milliseconds, milliseconds, std::string *why) -> std::optional<std::vector<Bytes>> {
          *why = "connection refused";
          return std::nullopt;
        });
      }
      out.status[i] = comm.open(group, group.members[i],
                                std::chrono::steady_clock::now() + milliseconds(timeout_ms), &out.why[i]);
    });
  }
  for (auto &t : threads) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const GroupComm::ExchangeCounts after = GroupComm::exchange_counts();
  out.counts = {after.hub - before.hub, after.dht - before.dht, after.hub_failed - before.hub_failed,
                after.failed - before.failed};
  return out;
}

void expect_built(const Outcome &o) {
  for (size_t i = 0; i < o.status.size(); ++i) EXPECT_EQ(o.status[i], LOOM_OK) << "member " << i << ": " << o.why[i];
  EXPECT_EQ(o.counts.failed, 0u);
  EXPECT_EQ(g_bad_slots.load(), 0) << "a slot came back that was not its member's";
}

TEST(GroupExchange, MembersThatReachTheHubPutNothingInTheDht) {
  const Outcome o = build({Route::hub, Route::hub, Route::hub}, 8000);
  expect_built(o);
  EXPECT_EQ(o.counts.hub, 3u);
  EXPECT_EQ(o.counts.dht, 0u);
  EXPECT_LT(o.seconds, 3.0);
}

TEST(GroupExchange, WithoutAHubTheDhtCarriesTheExchange) {
  const Outcome o = build({Route::none, Route::none, Route::none}, 8000);
  expect_built(o);
  EXPECT_EQ(o.counts.hub, 0u);
  EXPECT_EQ(o.counts.dht, 3u);
  EXPECT_EQ(o.counts.hub_failed, 0u);
}

TEST(GroupExchange, AHubNobodyReachesSendsEveryMemberToTheDhtAtOnce) {
  const Outcome o = build({Route::unreachable, Route::unreachable, Route::unreachable}, 8000);
  expect_built(o);
  EXPECT_EQ(o.counts.dht, 3u);
  EXPECT_EQ(o.counts.hub_failed, 3u);
  EXPECT_LT(o.seconds, 3.5) << "a member waited at a hub that had refused it";
}

TEST(GroupExchange, AMemberThatNeverComesFailsTheExchangeAtItsTimeNamingHowMany) {
  // Three members in the group, two build: the hub holds, the DHT waits,
  // and both fail at the deadline saying one part never came.
  const Outcome o = build({Route::hub, Route::hub, Route::absent}, 3000);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(o.status[i], LOOM_ERR_TIMEOUT) << o.why[i];
    EXPECT_NE(o.why[i].find("1 of 3 members never published"), std::string::npos) << o.why[i];
    EXPECT_NE(o.why[i].find("through the hub first: the hub did not bring every part"), std::string::npos) << o.why[i];
  }
  EXPECT_EQ(o.counts.failed, 2u);
  EXPECT_EQ(o.counts.hub + o.counts.dht, 0u);
  EXPECT_LT(o.seconds, 5.0);
}

TEST(GroupExchange, AMemberThatComesAfterTheOthersHalfStillMeetsThemThroughTheHub) {
  // Member 2 learnt of the group late: the others are past their half and
  // on the DHT, but still ask the hub, where member 2's part goes; member
  // 2 finds every early part there at once.
  const Outcome o = build({Route::hub, Route::hub, Route::late}, 4000);
  expect_built(o);
  EXPECT_EQ(o.counts.hub, 1u);  // the late one
  EXPECT_EQ(o.counts.dht, 2u);
  EXPECT_LT(o.seconds, 4.0) << "the early members waited for the late one's part until their deadline";
}

TEST(GroupExchange, AMemberThatCannotReachTheHubMeetsTheOthersInTheDhtAfterHalfTheTime) {
  // Members 0 and 1 reach the hub, 2 does not: the hub never completes, so
  // 0 and 1 go to the DHT at half the exchange's time, where 2 waits.
  const Outcome o = build({Route::hub, Route::hub, Route::unreachable}, 6000);
  expect_built(o);
  EXPECT_EQ(o.counts.hub, 0u);
  EXPECT_EQ(o.counts.dht, 3u);
  EXPECT_EQ(o.counts.hub_failed, 3u);
  EXPECT_GE(o.seconds, 2.9) << "the members at the hub left it before half the time";
  EXPECT_LT(o.seconds, 6.0);
}

TEST(GroupExchange, AHubThatTakesTheConnectionAndNeverAnswersLeavesTimeForTheDht) {
  // The leader reaches its own hub; the others' asks go to an address that
  // takes their connections and never answers. Their first ask must end
  // with time left for the DHT, where all three meet, within the exchange's
  // time (an ask held 2 s plus 3 s of slack outlasted a 4 s exchange).
  const Outcome o = build({Route::hub, Route::silent, Route::silent}, 4000);
  expect_built(o);
  EXPECT_EQ(o.counts.hub, 0u);
  EXPECT_EQ(o.counts.dht, 3u);
  EXPECT_EQ(o.counts.hub_failed, 3u);
  EXPECT_LT(o.seconds, 4.0);
}

}  // namespace
}  // namespace loom_collab
