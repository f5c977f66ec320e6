// SPDX-License-Identifier: Apache-2.0
// `loom swarm status`: an observer joins a running 3-peer swarm's DHT and
// lists exactly its live peers with their epochs and losses; a peer that
// left with SIGTERM is gone from the next listing; --csv keeps one loss row
// per epoch across runs of the observer.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

std::string peer_id(const Peer& p) { return own_peer_id(p.log()); }

loom::test::ProcessResult status(const std::string& address, const std::string& run_id,
                                 std::vector<std::string> more) {
  std::vector<std::string> argv = {kLoomBinary, "swarm", "status", "--initial-peers", address, "--run-id", run_id};
  argv.insert(argv.end(), more.begin(), more.end());
  return loom::test::run_process(argv, {}, seconds(60));
}

nlohmann::json one_snapshot(const std::string& address, const std::string& run_id) {
  auto r = status(address, run_id, {"--json", "--once"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.out << r.err;
    return {};
  }
}

std::set<std::string> listed(const nlohmann::json& snapshot) {
  std::set<std::string> ids;
  if (snapshot.contains("peers"))
    for (const auto& p : snapshot["peers"]) ids.insert(p["id"].get<std::string>());
  return ids;
}

// The CSV's rows as (epoch, mean loss, peers).
struct Row {
  int64_t epoch;
  double loss;
  int peers;
};
std::vector<Row> csv_rows(const std::string& path, std::string* header) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, *header);
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    Row r{};
    char loss[64] = {0};
    if (std::sscanf(line.c_str(), "%lld,%63[^,],%d", reinterpret_cast<long long*>(&r.epoch), loss, &r.peers) == 3) {
      r.loss = std::strtod(loss, nullptr);
      rows.push_back(r);
    }
  }
  return rows;
}

TEST(Observer, StatusListsExactlyTheLivePeersWithTheirEpochsAndLossAndForgetsOneThatLeft) {
  Scratch scratch;
  const std::string run_id = unique_run_id("observe");
  const std::vector<std::string> sets = {"strategy.options.listen=127.0.0.1", "strategy.options.run_id=" + run_id,
                                         "trainer.max_steps=100000", "strategy.options.min_peers=3",
                                         "strategy.options.matchmaking_time=1"};
  Peer p1(scratch, "p1", digits_config(), sets, {}, false);
  ASSERT_TRUE(wait_until([&] { return !p1.address().empty(); }, seconds(30))) << p1.tail();
  const std::map<std::string, std::string> join = {{"LOOM_INITIAL_PEERS", p1.address()}};
  Peer p2(scratch, "p2", digits_config(), sets, join, false);
  Peer p3(scratch, "p3", digits_config(), sets, join, false);
  std::set<std::string> ids;
  ASSERT_TRUE(wait_until(
      [&] {
        ids = {peer_id(p1), peer_id(p2), peer_id(p3)};
        return !ids.count("") && read_metric(p3.output_dir(), "train_loss").size() >= 1;
      },
      seconds(120)))
      << p3.tail();

  const nlohmann::json s = one_snapshot(p1.address(), run_id);
  EXPECT_EQ(listed(s), ids) << s.dump(2);
  ASSERT_TRUE(s.contains("swarm")) << s.dump(2);
  const int64_t epoch = s["swarm"]["epoch"].get<int64_t>();
  EXPECT_GT(epoch, 0) << s.dump(2);
  EXPECT_EQ(s["swarm"]["peers"].get<int>(), 3);
  EXPECT_EQ(s["swarm"]["target_batch_size"].get<int>(), 256);  // digits-collab.toml's
  EXPECT_EQ(s["swarm"]["models"].get<int>(), 1);
  for (const auto& p : s["peers"]) {
    ASSERT_TRUE(p["loss"].is_number()) << "a training peer publishes its loss: " << p.dump();
    EXPECT_GT(p["loss"].get<double>(), 0);
    EXPECT_NE(p["state"], "unhealthy") << p.dump();
    // Peers averaging together stay within an epoch or two of each other
    // (one that fell behind and is loading the state is on its way back).
    if (p["state"] != "loading") {
      EXPECT_LE(std::llabs(p["epoch"].get<int64_t>() - epoch), 2) << p.dump();
    }
  }
  ASSERT_FALSE(s["rounds"].empty()) << s.dump(2);
  for (const auto& r : s["rounds"]) {
    EXPECT_GE(r["size"].get<int>(), 2) << r.dump();
    for (const auto& m : r["members"]) EXPECT_TRUE(ids.count(m.get<std::string>())) << r.dump();
  }
  EXPECT_TRUE(s["swarm"]["loss"].is_number()) << s.dump(2);

  // --csv: one row per finished epoch, across two runs of the observer.
  const std::string csv = scratch.path("loss.csv");
  for (int run = 0; run < 2; ++run) {
    auto r = status(p1.address(), run_id, {"--csv", csv, "--duration", "4", "--interval", "1"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  std::string header;
  const std::vector<Row> rows = csv_rows(csv, &header);
  EXPECT_EQ(header, "epoch,mean_loss,peers,windows,nonfinite_peers,time_ms");
  ASSERT_GE(rows.size(), 2u) << read_text(csv);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_TRUE(std::isfinite(rows[i].loss) && rows[i].loss > 0) << read_text(csv);
    EXPECT_GE(rows[i].peers, 1);
    if (i > 0) {
      EXPECT_GT(rows[i].epoch, rows[i - 1].epoch) << "an epoch twice, or out of order:\n" << read_text(csv);
    }
  }

  // A peer that leaves says goodbye: the next listing no longer has it.
  const std::string gone = peer_id(p3);
  p3.signal(SIGTERM);
  ASSERT_EQ(p3.wait_exit(seconds(30)), 0) << p3.tail();
  const nlohmann::json after = one_snapshot(p1.address(), run_id);
  std::set<std::string> left = ids;
  left.erase(gone);
  EXPECT_EQ(listed(after), left) << after.dump(2);
  std::printf("[ figures ] observed %zu peers at epoch %lld; %zu loss rows; after SIGTERM %zu peers listed\n",
              listed(s).size(), static_cast<long long>(epoch), rows.size(), listed(after).size());
}

TEST(Observer, BadArgumentsAndAnUnansweredPeerAreClearErrors) {
  Scratch scratch;
  auto r = loom::test::run_process({kLoomBinary, "swarm", "status", "--initial-peers", "127.0.0.1:9"}, {}, seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--run-id is required"), std::string::npos) << r.err;
  r = loom::test::run_process({kLoomBinary, "swarm", "status", "--run-id", "a b", "--initial-peers", "127.0.0.1:9"}, {},
                              seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'a b' is not a run_id"), std::string::npos) << r.err;
  r = loom::test::run_process({kLoomBinary, "swarm", "status", "--run-id", "x", "--initial-peers", "nowhere"}, {},
                              seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'nowhere' is not host:port"), std::string::npos) << r.err;
  r = loom::test::run_process({kLoomBinary, "swarm", "status", "--run-id", "x"}, {{"LOOM_INITIAL_PEERS", ""}},
                              seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no peer to join through"), std::string::npos) << r.err;
  const std::string not_csv = scratch.path("notes.csv");
  std::ofstream(not_csv) << "my own notes\n";
  r = loom::test::run_process(
      {kLoomBinary, "swarm", "status", "--run-id", "x", "--initial-peers", "127.0.0.1:9", "--csv", not_csv}, {},
      seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not a loom swarm status CSV"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(not_csv), "my own notes\n");  // left as it was
  // Nobody at that address: a bounded wait, exit 1, the address named.
  const std::string nobody = "127.0.0.1:" + std::to_string(unused_port());
  r = loom::test::run_process(
      {kLoomBinary, "swarm", "status", "--run-id", "x", "--initial-peers", nobody, "--timeout", "1", "--once"}, {},
      seconds(30));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no initial peer answered within 1 s (" + nobody + ")"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom::swarm
