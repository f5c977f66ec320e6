// SPDX-License-Identifier: Apache-2.0
// Bad options end a peer at once with exit code 2 and the reason; an initial
// peer that does not answer ends it within bootstrap_timeout, naming the address.
#include <gtest/gtest.h>

#include "support/subprocess.hpp"
#include "swarm.hpp"
#include "test_paths.hpp"

namespace loom::swarm {
namespace {

loom::test::ProcessResult run_peer(const Scratch& scratch, const std::vector<std::string>& sets,
                                   milliseconds timeout = seconds(60)) {
  std::vector<std::string> argv = {kLoomBinary, "train", digits_config(), "--set",
                                   "trainer.output_dir=" + scratch.path("out"), "--set",
                                   "strategy.options.listen=127.0.0.1", "--set",
                                   "strategy.options.run_id=" + unique_run_id("bad")};
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return loom::test::run_process(argv, {{"LOOM_INITIAL_PEERS", ""}}, timeout);
}

struct BadOption {
  std::string set;
  std::vector<std::string> said;  // the message names the option, the value and what is valid
};

TEST(Swarm, BadOptionsExitWithCode2AndTheReason) {
  Scratch scratch;
  const BadOption cases[] = {
      {"strategy.options.target_batch_size=0", {"target_batch_size", "= 0", "from 1 to"}},
      {"strategy.options.min_group_size=-1", {"min_group_size", "= -1", "from 1 to 4096"}},
      {"strategy.options.target_group_size=1", {"target_group_size", "= 1", "averages nothing", "from 2 to 4096"}},
      {"strategy.options.target_group_size=-2", {"target_group_size", "= -2", "from 0 to 4096"}},
      {"strategy.options.load_donors_at_once=0", {"load_donors_at_once", "= 0", "from 1 to 16"}},
      {"strategy.options.relay_clients=65", {"relay_clients", "= 65", "from 0 to 64"}},
      {"strategy.options.client_mode=sometimes", {"client_mode", "sometimes"}},
      {"strategy.options.initial_peers=nonsense", {"initial_peers", "'nonsense'", "host:port"}},
      {"strategy.options.initial_peers=127.0.0.1:70000", {"initial_peers", "70000", "1 to 65535"}},
      {"strategy.options.averaging_timeout=0", {"averaging_timeout", "= 0", "from 0.1 to 86400"}},
      {"strategy.options.report_quiet_after=-1", {"report_quiet_after", "= -1", "from 0 to 86400"}},
      {"strategy.options.run_id=no spaces", {"run_id", "'no spaces'", "[A-Za-z0-9_.-]"}},
      {"strategy.options.serve_max_per_address=0", {"serve_max_per_address", "= 0", "from 1 to 1024"}},
      {"strategy.options.serve_idle_timeout=0", {"serve_idle_timeout", "= 0", "from 0.1 to 3600"}},
      {"strategy.options.aggregation=median", {"aggregation", "'median'", "\"mean\" or \"centered_clip\""}},
      {"strategy.options.clip_radius=0", {"clip_radius", "= 0", "from 0.01 to"}},
      {"strategy.options.clip_iterations=0", {"clip_iterations", "= 0", "from 1 to 100"}},
  };
  for (const auto& c : cases) {
    auto r = run_peer(scratch, {c.set});
    const std::string all = r.out + r.err;
    EXPECT_FALSE(r.timed_out) << c.set;
    EXPECT_EQ(r.exit_code, 2) << c.set << "\n" << all;
    for (const auto& word : c.said) EXPECT_NE(all.find(word), std::string::npos) << c.set << ": no '" << word << "' in\n" << all;
  }
}

// Local updates (outer_step.h) and delayed averaging with what they cannot
// work with yet.
TEST(Swarm, LocalUpdatesAndDelayOptionsThatDoNotFitExitWithCode2AndTheReason) {
  Scratch scratch;
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"strategy.options.local_steps=50"}, {"local_steps = 50", "without local_updates = true"}},
      {{"strategy.options.local_updates=true", "strategy.options.average_optimizer_state=true"},
       {"local_updates = true is not valid with average_optimizer_state = true"}},
      {{"strategy.options.local_updates=true", "strategy.options.outer_momentum=1"},
       {"outer_momentum", "= 1", "from 0 to"}},
      {{"strategy.options.local_updates=true", "strategy.options.outer_lr=0"}, {"outer_lr", "= 0", "from 1e-06 to"}},
      {{"strategy.options.delay_averaging=true", "strategy.options.local_updates=true"},
       {"delay_averaging = true is not valid with local_updates = true"}},
      {{"strategy.options.delay_averaging=true", "strategy.options.client_mode=true"},
       {"delay_averaging = true is not valid with client_mode = true"}},
      {{"strategy.options.delay_averaging=yes"}, {"delay_averaging", "yes"}},
      {{"strategy.options.local_updates=true", "strategy.options.local_steps=7", "trainer.max_steps=20"},
       {"trainer.max_steps = 20 is not a whole number of epochs of local_steps = 7", "a multiple of 7"}},
  };
  for (const auto& [sets, said] : cases) {
    auto r = run_peer(scratch, sets);
    const std::string all = r.out + r.err;
    EXPECT_FALSE(r.timed_out) << sets.back();
    EXPECT_EQ(r.exit_code, 2) << sets.back() << "\n" << all;
    for (const auto& word : said) EXPECT_NE(all.find(word), std::string::npos) << sets.back() << ": no '" << word << "' in\n" << all;
  }
}

TEST(Swarm, UnansweredInitialPeerEndsThePeerWithinBootstrapTimeout) {
  Scratch scratch;
  const std::string nobody = "127.0.0.1:" + std::to_string(unused_port());
  const auto start = Clock::now();
  auto r = run_peer(scratch, {"strategy.options.initial_peers=" + nobody, "strategy.options.bootstrap_timeout=2"});
  const double seconds_taken = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string all = r.out + r.err;
  EXPECT_FALSE(r.timed_out) << all;
  EXPECT_NE(r.exit_code, 0) << all;
  EXPECT_EQ(r.signal, 0) << all;
  EXPECT_NE(all.find(nobody), std::string::npos) << "the message does not name " << nobody << ":\n" << all;
  EXPECT_NE(all.find("no initial peer answered"), std::string::npos) << all;
  // bootstrap_timeout plus the process's start (LibTorch, the data set),
  // which takes up to ~5 s on a loaded 2-core machine.
  EXPECT_LT(seconds_taken, 2 + 15) << all;
  std::printf("[ figures  ] unanswered initial peer: exit %d after %.1f s (bootstrap_timeout 2 s)\n", r.exit_code,
              seconds_taken);
}

}  // namespace
}  // namespace loom::swarm
