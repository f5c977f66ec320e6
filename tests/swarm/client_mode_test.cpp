// SPDX-License-Identifier: Apache-2.0
// Client mode (client_mode = true, relay.h): a peer that accepts no
// connection trains with two full peers. It never joins a group's
// communicator and serves no state; each round its weighted gradients go
// to one of the full peers over a connection it opened, which averages
// them with its group and sends the mean back. The swarm converges and the
// client ends with the full peers' parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <regex>

#include "records.h"
#include "relay.h"
#include "state_transfer.h"
#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

// The parameters (tensors p0, p1, ...) of a state in Loom's raw format
// (core/src/train/state_format.cpp), in order; empty when the bytes are not
// such a state.
std::vector<float> parameters_of_state(const std::vector<uint8_t> &state) {
  if (state.size() < 16 || std::memcmp(state.data(), "LOOMST02", 8) != 0) return {};
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | state[8 + i];
  if (header > state.size() - 16) return {};
  const std::string text(reinterpret_cast<const char *>(state.data() + 16), size_t(header));
  const size_t data = (16 + size_t(header) + 63) / 64 * 64;
  std::vector<float> out;
  for (int i = 0;; ++i) {
    const std::string tag = "\ntensor p" + std::to_string(i) + " Float ";
    const size_t at = text.find(tag);
    if (at == std::string::npos) return out;
    char shape[256] = {};
    unsigned long long offset = 0, bytes = 0;
    if (std::sscanf(text.c_str() + at + tag.size(), "%255s %llu %llu", shape, &offset, &bytes) != 3 ||
        data + offset + bytes > state.size() || bytes % 4 != 0)
      return {};
    const size_t first = out.size();
    out.resize(first + bytes / 4);
    std::memcpy(out.data() + first, state.data() + data + offset, bytes);
  }
}

TEST(ClientMode, AClientTrainsThroughARelayAndEndsWithTheSwarmsParameters) {
  Scratch scratch;
  const std::string run = unique_run_id("client");
  // 200 steps: the full peers may be dozens of epochs ahead when the
  // client's first round comes (below), and what is left must still say
  // something.
  constexpr size_t kSteps = 200;
  const std::vector<std::string> sets = {"trainer.threads=1", "strategy.options.listen=127.0.0.1",
                                         "strategy.options.verbose=true", "strategy.options.min_peers=3",
                                         "trainer.max_steps=" + std::to_string(kSteps),
                                         "strategy.options.run_id=" + run};
  std::vector<std::string> client_sets = sets;
  client_sets.push_back("strategy.options.client_mode=true");
  auto p0 = std::make_unique<Peer>(scratch, "p0", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !p0->address().empty(); }, seconds(30))) << p0->tail();
  const std::map<std::string, std::string> env{{"LOOM_INITIAL_PEERS", p0->address()}};
  auto p1 = std::make_unique<Peer>(scratch, "p1", digits_config(), sets, env);
  auto c0 = std::make_unique<Peer>(scratch, "c0", digits_config(), client_sets, env);
  const auto deadline = Clock::now() + seconds(240);
  for (Peer *p : {p0.get(), p1.get(), c0.get()}) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ASSERT_EQ(p->wait_exit(std::max(left, milliseconds(1))), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.93) << p->name();
    EXPECT_EQ(final->steps, int64_t(kSteps)) << p->name();
  }
  const std::string client = c0->log();
  EXPECT_NE(client.find("in client mode: it accepts no connection"), std::string::npos) << c0->tail();
  EXPECT_NE(client.find("relaying this peer's rounds through peer"), std::string::npos) << c0->tail();
  EXPECT_EQ(client.find("state server listening"), std::string::npos) << "a client-mode peer started a state server";
  const size_t relayed = count_of(client, "samples through relay peer");
  // One client: each of its relay's "answered 1 client-mode peer(s)" lines is one of its rounds.
  // (or one that came after its relay's round, and got that round's mean).
  size_t answered = 0;
  for (Peer *p : {p0.get(), p1.get()})
    answered += count_of(p->log(), "answered 1 client-mode peer(s) relayed through this peer (averaged)") +
                count_of(p->log(), "came after its round: it gets that round's mean");
  // The full peers may run several epochs before the client's first round:
  // they start once its record is there, while it still checks the model and
  // loads the state (a digits epoch takes 50 ms; on a loaded machine the
  // client came in at epoch 16 to 21, a CI run saw 42 relayed rounds in 100,
  // and another came in at epoch 80). What it owes is the epochs from its
  // first round through a relay on.
  static const std::regex round(R"(epoch ([0-9]+): (averaged gradients of|the relay's round went without))");
  std::smatch first;
  ASSERT_TRUE(std::regex_search(client, first, round)) << c0->tail();
  const size_t from = std::stoul(first[1]), owed = kSteps - from;
  std::printf("client: first round through a relay at epoch %zu; %zu of its %zu epochs averaged through a relay; "
              "relays answered %zu\n", from, relayed, owed, answered);
  EXPECT_GE(relayed, size_t(30)) << "the client came in too late for the test to say anything";
  EXPECT_GE(relayed * 10, owed * 8) << "the client averaged through its relay in too few of its epochs";
  EXPECT_EQ(relayed, answered);
  // State averaging (at every 5th epoch) goes through the relay too.
  const size_t synced = count_of(client, "averaged the parameters through relay peer"), points = (kSteps - from) / 5;
  std::printf("client: parameters averaged through the relay at %zu of the %zu sync points after its first round\n",
              synced, points);
  EXPECT_GE(synced * 4, points * 3);
  // A relayed round is one its relay's group averaged: on the whole target.
  static const std::regex totals(R"(averaged gradients of ([0-9]+) samples through relay peer)");
  for (std::sregex_iterator it(client.begin(), client.end(), totals), end; it != end; ++it)
    EXPECT_GE(std::stoll((*it)[1]), 256) << (*it)[0];
  // Every member of the last round gets one mean; the client applies it as
  // its relay does, and its missed rounds are made up by loading the state.
  const double d = max_parameter_difference(p0->final_dir(), c0->final_dir());
  std::printf("largest parameter difference, client against p0: %.3g\n", d);
  EXPECT_LE(d, 0.01);
}

// The id a client logged its relay by, the n-th time ("relaying this peer's
// rounds through peer ID at ..."); empty if it has not.
std::string relay_id(const std::string &log, size_t n) {
  static const std::regex re(R"(relaying this peer's rounds through peer ([0-9]+) at)");
  size_t i = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it, ++i)
    if (i == n) return (*it)[1];
  return "";
}

TEST(ClientMode, AKeyedClientMovesToAnotherRelayWhenItsRelayIsKilled) {
  Scratch scratch;
  const std::string key = scratch.path("swarm.key");
  ASSERT_EQ(loom::test::run_process({kLoomBinary, "swarm", "keygen", key}).exit_code, 0);
  const std::vector<std::string> sets = {"trainer.threads=1", "strategy.options.listen=127.0.0.1",
                                         "strategy.options.verbose=true", "strategy.options.min_peers=4",
                                         "trainer.max_steps=200", "strategy.options.swarm_key=" + key,
                                         "strategy.options.run_id=" + unique_run_id("client-kill")};
  std::vector<std::string> client_sets = sets;
  client_sets.push_back("strategy.options.client_mode=true");
  std::vector<std::unique_ptr<Peer>> full;
  full.push_back(std::make_unique<Peer>(scratch, "p0", digits_config(), sets));
  ASSERT_TRUE(wait_until([&] { return !full[0]->address().empty(); }, seconds(30))) << full[0]->tail();
  const std::map<std::string, std::string> env{{"LOOM_INITIAL_PEERS", full[0]->address()}};
  for (int i = 1; i < 3; ++i)
    full.push_back(std::make_unique<Peer>(scratch, "p" + std::to_string(i), digits_config(), sets, env));
  auto client = std::make_unique<Peer>(scratch, "c0", digits_config(), client_sets, env);
  // Its relay, once it has averaged through it a while.
  ASSERT_TRUE(wait_until([&] { return count_of(client->log(), "samples through relay peer") >= 40; }, seconds(120)))
      << client->tail();
  const std::string first = relay_id(client->log(), 0);
  Peer *relay = nullptr;
  for (auto &p : full)
    if (p->log().find("peer " + first + " of run") != std::string::npos) relay = p.get();
  ASSERT_NE(relay, nullptr) << "no full peer is " << first;
  const size_t before = count_of(client->log(), "samples through relay peer");
  relay->kill();
  const auto deadline = Clock::now() + seconds(240);
  for (auto &p : full) {
    if (p.get() == relay) continue;
    ASSERT_EQ(p->wait_exit(std::chrono::duration_cast<milliseconds>(deadline - Clock::now())), 0) << p->tail();
  }
  ASSERT_EQ(client->wait_exit(std::chrono::duration_cast<milliseconds>(deadline - Clock::now())), 0) << client->tail();
  const std::string log = client->log();
  const std::string second = relay_id(log, 1);
  EXPECT_FALSE(second.empty()) << "the client never moved to another relay:\n" << client->tail();
  EXPECT_NE(second, first);
  const size_t after = count_of(log, "samples through relay peer") - before;
  std::printf("client: %zu epochs through relay %s, then %zu through %s\n", before, first.c_str(), after, second.c_str());
  // Of the 160 epochs left, most: the relay's death costs the client a
  // round and a load of the state (in a swarm this fast, 104 to 150 of them
  // measured).
  EXPECT_GE(after, size_t(80)) << log;
  auto final = final_result(log);
  ASSERT_TRUE(final) << client->tail();
  EXPECT_EQ(final->steps, 200);
  EXPECT_GE(final->accuracy, 0.93);
  Peer *survivor = full[0].get() == relay ? full[1].get() : full[0].get();
  const double d = max_parameter_difference(survivor->final_dir(), client->final_dir());
  std::printf("largest parameter difference, client against a survivor: %.3g\n", d);
  EXPECT_LE(d, 0.01);
}

// Under local updates, a client whose relay is SIGKILLed in the middle of
// the run steps its outer optimizer alone that epoch, so its anchor leaves
// the swarm's: it loads the state, moves to another relay, and ends on the
// survivors' anchor. The full peers take 20 ms a step (digits alone would
// end the run within seconds of the client's start), and two of them come
// once the client waits, so that all four start together.
TEST(ClientMode, UnderLocalUpdatesAClientWhoseRelayIsKilledLoadsTheStateAndEndsOnTheSwarmsAnchor) {
  Scratch scratch;
  const std::vector<std::string> sets = {
      "trainer.threads=1", "trainer.max_steps=300", "strategy.options.listen=127.0.0.1",
      "strategy.options.verbose=true", "strategy.options.local_updates=true", "strategy.options.local_steps=10",
      "strategy.options.min_peers=4", "strategy.options.run_id=" + unique_run_id("local-client-kill")};
  std::vector<std::string> client_sets = sets;
  const std::vector<std::string> full_sets = slowed(sets, 20);
  client_sets.push_back("strategy.options.client_mode=true");
  std::vector<std::unique_ptr<Peer>> full;
  full.push_back(std::make_unique<Peer>(scratch, "p0", digits_config(), full_sets));
  ASSERT_TRUE(wait_until([&] { return !full[0]->address().empty(); }, seconds(30))) << full[0]->tail();
  const std::map<std::string, std::string> env{{"LOOM_INITIAL_PEERS", full[0]->address()}};
  auto client = std::make_unique<Peer>(scratch, "c0", digits_config(), client_sets, env);
  ASSERT_TRUE(wait_until([&] { return client->log().find("before training") != std::string::npos; }, seconds(60)))
      << client->tail();
  for (int i = 1; i < 3; ++i)
    full.push_back(std::make_unique<Peer>(scratch, "p" + std::to_string(i), digits_config(), full_sets, env));
  ASSERT_TRUE(wait_until([&] { return count_of(client->log(), "samples through relay peer") >= 5; }, seconds(120)))
      << client->tail();
  const std::string first = relay_id(client->log(), 0);
  Peer *relay = nullptr;
  for (auto &p : full)
    if (p->log().find("peer " + first + " of run") != std::string::npos) relay = p.get();
  ASSERT_NE(relay, nullptr) << "no full peer is " << first;
  const size_t before = count_of(client->log(), "samples through relay peer");
  const size_t loads_before = count_of(client->log(), "loaded the state of epoch");
  relay->kill();
  const auto deadline = Clock::now() + seconds(240);
  std::vector<Peer *> survivors;
  for (auto &p : full) {
    if (p.get() == relay) continue;
    survivors.push_back(p.get());
    ASSERT_EQ(p->wait_exit(std::chrono::duration_cast<milliseconds>(deadline - Clock::now())), 0) << p->tail();
  }
  ASSERT_EQ(client->wait_exit(std::chrono::duration_cast<milliseconds>(deadline - Clock::now())), 0) << client->tail();
  const std::string log = client->log();
  const std::string second = relay_id(log, 1);
  const size_t after = count_of(log, "samples through relay peer") - before,
               loads = count_of(log, "loaded the state of epoch") - loads_before;
  const double d = max_parameter_difference(survivors[0]->final_dir(), client->final_dir());
  std::printf("[ figures  ] client under local updates: %zu outer steps through relay %s, then %zu through %s, "
              "%zu state loads after the kill; parameters apart from a survivor's by %.3g\n",
              before, first.c_str(), after, second.c_str(), loads, d);
  EXPECT_FALSE(second.empty()) << "the client never moved to another relay:\n" << client->tail();
  EXPECT_NE(second, first);
  EXPECT_GE(loads, 1u) << "the client stepped alone and never loaded the state:\n" << client->tail();
  EXPECT_GE(after, 5u) << client->tail();
  auto final = final_result(log);
  ASSERT_TRUE(final) << client->tail();
  EXPECT_EQ(final->steps, 300);
  EXPECT_GE(final->accuracy, 0.9);
  EXPECT_EQ(d, 0.0) << "the client ends on the survivors' anchor";
  EXPECT_EQ(max_parameter_difference(survivors[0]->final_dir(), survivors[1]->final_dir()), 0.0);
}

// The relay's side against a client that sends what it must not: each
// contribution is answered refused (or missed), the relay says why in its
// log, and the swarm trains on unharmed.
TEST(ClientMode, ARelayRefusesWhatAClientMustNotSend) {
  Scratch scratch;
  const std::string run = unique_run_id("client-rogue");
  const std::vector<std::string> sets = {"trainer.threads=1", "strategy.options.listen=127.0.0.1",
                                         "strategy.options.verbose=true", "strategy.options.min_peers=2",
                                         "trainer.max_steps=300", "strategy.options.run_id=" + run};
  auto p0 = std::make_unique<Peer>(scratch, "p0", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !p0->address().empty(); }, seconds(30))) << p0->tail();
  auto p1 = std::make_unique<Peer>(scratch, "p1", digits_config(), sets,
                                   std::map<std::string, std::string>{{"LOOM_INITIAL_PEERS", p0->address()}});
  static const std::regex numel_re(R"(training digits \(([0-9]+) parameters\))");
  std::smatch found;
  std::string log0;
  ASSERT_TRUE(wait_until([&] { log0 = p0->log(); return std::regex_search(log0, found, numel_re); }, seconds(60)))
      << p0->tail();
  const uint64_t numel = std::stoull(found[1]);
  const std::string where = state_address(*p0);
  const std::string host = where.substr(0, where.rfind(':'));
  const uint16_t port = uint16_t(std::stoul(where.substr(where.rfind(':') + 1)));
  auto epoch_now = [&] {
    static const std::regex re(R"(epoch ([0-9]+): averaged gradients)");
    int64_t e = 0;
    const std::string log = p0->log();
    for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) e = std::stoll((*it)[1]);
    return e;
  };
  ASSERT_TRUE(wait_until([&] { return epoch_now() >= 10; }, seconds(60))) << p0->tail();
  std::string why;
  auto link = loom_collab::RelayLink::open(host, port, loom_collab::run_hash(run), std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why;
  using loom_collab::RelayKind;
  using loom_collab::RelayStatus;
  auto send = [&](std::vector<float> values, double weight, int64_t ahead, loom_collab::RelayKind kind,
                  bool ends = false) {
    loom_collab::RelayMessage m;
    m.kind = kind;
    m.epoch = epoch_now() + ahead;
    m.weight = weight;
    m.norm = 1e-3;  // a lie the relay must not trust
    m.peer = 42;
    m.values = std::move(values);
    const bool answered = link->exchange(m, numel + 4096, Clock::now() + seconds(60), &why);
    EXPECT_EQ(answered, !ends) << why;
    return answered ? m.status : RelayStatus::contribution;
  };
  // More values than the model has: a defect, the session ends; fewer: refused.
  EXPECT_EQ(send(std::vector<float>(numel + 1, 0.0f), 32, 2, RelayKind::gradients, true), RelayStatus::contribution);
  EXPECT_TRUE(wait_until([&] { return p0->log().find("bad relay message") != std::string::npos; }, seconds(10)))
      << p0->tail();
  link = loom_collab::RelayLink::open(host, port, loom_collab::run_hash(run), std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why;
  EXPECT_EQ(send(std::vector<float>(numel - 1, 0.0f), 32, 2, RelayKind::gradients), RelayStatus::refused);
  // Values that are not finite, a weight that is no sample count.
  std::vector<float> nan(numel, 0.0f);
  nan[7] = std::nanf("");
  EXPECT_EQ(send(nan, 32, 2, RelayKind::gradients), RelayStatus::refused);
  EXPECT_EQ(send(std::vector<float>(numel, 0.0f), -1, 2, RelayKind::gradients), RelayStatus::refused);
  // Gradients a million times too large, whatever norm they claim: refused
  // by the outlier rule when the relay's round takes them.
  EXPECT_EQ(send(std::vector<float>(numel, 1e6f), 32, 2, RelayKind::gradients), RelayStatus::refused);
  EXPECT_TRUE(wait_until([&] { return p0->log().find("brought gradients of norm") != std::string::npos; }, seconds(10)))
      << p0->tail();
  // Parameters far from the relay's, for a sync point ahead (every 5
  // epochs): refused when its state averaging takes them.
  const int64_t now = epoch_now();
  EXPECT_EQ(send(std::vector<float>(numel, 1e3f), 1, (now / 5 + 2) * 5 - now, RelayKind::parameters),
            RelayStatus::refused);
  EXPECT_TRUE(wait_until([&] { return p0->log().find("'s parameters lie") != std::string::npos; }, seconds(10)))
      << p0->tail();
  link.reset();
  for (Peer *p : {p0.get(), p1.get()}) {
    ASSERT_EQ(p->wait_exit(seconds(240)), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.93) << p->name();
  }
  const std::string log = p0->log();
  EXPECT_NE(log.find("was refused: it sent " + std::to_string(numel - 1) + " values; this model has " +
                     std::to_string(numel)),
            std::string::npos);
  EXPECT_NE(log.find("its gradients are not finite"), std::string::npos);
  EXPECT_NE(log.find("is not a positive sample count"), std::string::npos);
  EXPECT_LE(max_parameter_difference(p0->final_dir(), p1->final_dir()), 1e-6);
}

// A relay judges a client's parameters against its own whole drift since
// its last sync, not that drift per epoch (which its members compare): a
// client that sends the swarm's parameters of the last sync point lies
// exactly the relay's whole drift from the relay's parameters, and is
// averaged. Twenty epochs between syncs put such a client at 20 times the
// per-epoch drift, over the outlier rule's 10 (592aa5f's regression).
TEST(ClientMode, ARelayWhoseLastSyncIsManyEpochsOldTakesAClientsParametersOfThatSync) {
  Scratch scratch;
  constexpr int64_t kEvery = 20;
  const std::string run = unique_run_id("client-old-sync");
  const std::vector<std::string> sets = {"trainer.threads=1", "strategy.options.listen=127.0.0.1",
                                         "strategy.options.verbose=true", "strategy.options.min_peers=2",
                                         "trainer.max_steps=" + std::to_string(4 * kEvery),
                                         "strategy.options.average_state_every=" + std::to_string(kEvery),
                                         "strategy.options.run_id=" + run};
  auto p0 = std::make_unique<Peer>(scratch, "p0", digits_config(), sets);
  ASSERT_TRUE(wait_until([&] { return !p0->address().empty(); }, seconds(30))) << p0->tail();
  auto p1 = std::make_unique<Peer>(scratch, "p1", digits_config(), sets,
                                   std::map<std::string, std::string>{{"LOOM_INITIAL_PEERS", p0->address()}});
  auto epoch_now = [&] {
    const auto rounds = averaged_rounds(p0->log());
    return rounds.empty() ? int64_t(0) : rounds.back().epoch;
  };
  ASSERT_TRUE(wait_until([&] { return epoch_now() > kEvery; }, seconds(120))) << p0->tail();
  const std::string where = state_address(*p0);
  const std::string host = where.substr(0, where.rfind(':'));
  const uint16_t port = uint16_t(std::stoul(where.substr(where.rfind(':') + 1)));
  // The swarm's parameters of the last sync point, as a joiner gets them.
  std::string why;
  auto got = loom_collab::download_state({loom_collab::Donor{1, host, port, kEvery}}, loom_collab::run_hash(run),
                                         kEvery, milliseconds(20000), milliseconds(5000),
                                         [](loom_collab::Level, const std::string &) {}, &why);
  ASSERT_TRUE(got) << why;
  ASSERT_EQ(got->epoch % kEvery, 0) << "a donor serves the state of a sync point";
  std::vector<float> values = parameters_of_state(got->bytes);
  ASSERT_FALSE(values.empty()) << "not a raw Loom state";
  const int64_t next_sync = got->epoch + kEvery;
  ASSERT_LT(epoch_now(), next_sync - 2) << "too late to send for the next sync point";
  auto link = loom_collab::RelayLink::open(host, port, loom_collab::run_hash(run), std::nullopt, milliseconds(5000), &why);
  ASSERT_TRUE(link) << why;
  loom_collab::RelayMessage m;
  m.kind = loom_collab::RelayKind::parameters;
  m.epoch = next_sync;
  m.weight = 1;
  m.peer = 42;
  m.values = values;
  ASSERT_TRUE(link->exchange(m, values.size() + 4096, Clock::now() + seconds(120), &why)) << why;
  EXPECT_EQ(m.status, loom_collab::RelayStatus::averaged) << p0->tail();
  EXPECT_EQ(p0->log().find("'s parameters lie"), std::string::npos) << p0->tail();
  // One stale contribution averaged in does not set the run back.
  link.reset();
  for (Peer *p : {p0.get(), p1.get()}) {
    ASSERT_EQ(p->wait_exit(seconds(240)), 0) << p->tail();
    auto final = final_result(p->log());
    ASSERT_TRUE(final) << p->tail();
    EXPECT_GE(final->accuracy, 0.9) << p->name();
  }
}

}  // namespace
}  // namespace loom::swarm
