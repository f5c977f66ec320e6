// SPDX-License-Identifier: Apache-2.0
// snapshot_ahead with real peers: donors that snapshot their state at every
// epoch's start ("always") answer a joiner from a snapshot they already
// hold; donors that snapshot only on request ("never") make it wait for
// their training thread. A value outside "auto", "always" and "never" is a
// configuration error.
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <regex>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

struct AheadCase {
  const char* mode;
  bool ahead;  // the donors snapshot before the joiner asks
};

void PrintTo(const AheadCase& c, std::ostream* os) { *os << c.mode; }

class SnapshotAhead : public ::testing::TestWithParam<AheadCase> {};

// How each donor that sent the joiner a whole state got its snapshot, from
// "state server: sent epoch E (B bytes) to ADDR in T ms, HOW (...)".
std::vector<std::string> how_sent(const std::string& log) {
  static const std::regex sent(R"(state server: sent epoch \d+ \(\d+ bytes\) to \S+ in \d+ ms, ([^(]+) \()");
  std::vector<std::string> out;
  for (std::sregex_iterator it(log.begin(), log.end(), sent), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

TEST_P(SnapshotAhead, DecidesWhetherAJoinerWaitsForTheDonorsTrainingThread) {
  const AheadCase c = GetParam();
  Scratch scratch;
  const std::vector<std::string> sets = {"strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
                                         "strategy.options.run_id=" + unique_run_id(std::string("ahead-") + c.mode),
                                         "trainer.max_steps=300", "strategy.options.average_state_every=0",
                                         "strategy.options.load_state_timeout=20",
                                         std::string("strategy.options.snapshot_ahead=") + c.mode};
  // 300 steps: the pair runs about 600 a second, and at 60 it had finished
  // before a joiner started on a loaded machine could read its records.
  auto pair = sets;
  pair.push_back("strategy.options.min_peers=2");
  Peer p1(scratch, "p1", digits_config(), pair);
  ASSERT_TRUE(wait_until([&] { return !p1.address().empty(); }, seconds(30))) << p1.tail();
  Peer p2(scratch, "p2", digits_config(), pair, {{"LOOM_INITIAL_PEERS", p1.address()}});
  ASSERT_TRUE(wait_until([&] { return last_finished_epoch(p1.log()) >= 5 && last_finished_epoch(p2.log()) >= 5; },
                         seconds(90)))
      << p1.tail() << p2.tail();
  Peer late(scratch, "late", digits_config(), sets, {{"LOOM_INITIAL_PEERS", p2.address()}});
  ASSERT_TRUE(wait_until([&] { return !loaded_states(late.log()).empty() || !late.running(); }, seconds(60)))
      << late.tail();
  ASSERT_FALSE(loaded_states(late.log()).empty()) << late.tail();

  // The donor whose stream won logs the whole transfer once delivered.
  std::vector<std::string> how;
  ASSERT_TRUE(wait_until(
      [&] {
        how = how_sent(p1.log());
        const auto more = how_sent(p2.log());
        how.insert(how.end(), more.begin(), more.end());
        return !how.empty();
      },
      seconds(10)))
      << p1.tail() << p2.tail();
  for (const auto& h : how) {
    std::printf("[ figures  ] snapshot_ahead = %s: a donor sent the joiner its state %s\n", c.mode, h.c_str());
    if (c.ahead)
      EXPECT_EQ(h, "from a snapshot ready when it asked");
    else
      EXPECT_TRUE(h.rfind("after waiting ", 0) == 0 && h.find("for the training thread's snapshot") != std::string::npos)
          << h;
  }
  for (Peer* p : {&p1, &p2}) {
    const std::string log = p->log();
    EXPECT_EQ(log.find("ahead of any request") != std::string::npos, c.ahead) << p->name() << "\n" << p->tail();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotAhead,
                         ::testing::Values(AheadCase{"always", true}, AheadCase{"never", false}),
                         [](const ::testing::TestParamInfo<AheadCase>& info) { return std::string(info.param.mode); });

TEST(SnapshotAheadOption, AnotherValueIsAConfigurationError) {
  Scratch scratch;
  auto r = loom::test::run_process({kLoomBinary, "train", digits_config(), "--set", "trainer.output_dir=" + scratch.path("out"),
                                    "--set", "strategy.options.listen=127.0.0.1", "--set",
                                    "strategy.options.snapshot_ahead=sometimes"},
                                   {{"LOOM_INITIAL_PEERS", ""}}, seconds(60));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("option snapshot_ahead = 'sometimes' is not valid; use \"auto\", \"always\" or \"never\""),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace loom::swarm
