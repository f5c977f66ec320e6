// SPDX-License-Identifier: Apache-2.0
// `loom launch` with real processes: success, a rank that fails, a rank that
// is killed, and a launcher told to keep going.
#include <gtest/gtest.h>

#include <fstream>

#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

using namespace std::chrono_literals;

ProcessResult launch(std::vector<std::string> args) {
  std::vector<std::string> argv = {kLoomBinary, "launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 60s);
}

TEST(Launch, EveryRankGetsTheJobVariablesAndPrefixedOutput) {
  auto r = launch({"-n", "3", "--master-port", "29777", "--", "sh", "-c",
                   "echo rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE addr=$MASTER_ADDR port=$MASTER_PORT; echo e$RANK >&2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 3; ++i) {
    std::string expected = "[rank " + std::to_string(i) + "] rank=" + std::to_string(i) + " local=" + std::to_string(i) +
                           " world=3 addr=127.0.0.1 port=29777\n";
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("[rank " + std::to_string(i) + "] e" + std::to_string(i)), std::string::npos) << r.err;
  }
}

TEST(Launch, PicksAFreePortWhenNoneIsGiven) {
  auto r = launch({"-n", "2", "--", "sh", "-c", "test \"$MASTER_PORT\" -gt 0 && echo port-ok"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 1] port-ok"), std::string::npos) << r.out;
}

// Outgoing connections take their ports from the kernel's ephemeral range; a
// master port from there could be taken before rank 0's store binds it.
TEST(Launch, PicksItsPortOutsideTheEphemeralRange) {
  int low = 0, high = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  ASSERT_GT(low, 0) << "cannot read ip_local_port_range";
  for (int i = 0; i < 5; ++i) {
    auto r = launch({"-n", "1", "--", "sh", "-c", "echo port=$MASTER_PORT"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find("port=");
    ASSERT_NE(at, std::string::npos) << r.out;
    const int port = std::stoi(r.out.substr(at + 5));
    EXPECT_TRUE(port < low || port > high) << port << " is in the ephemeral range " << low << "-" << high;
    EXPECT_GE(port, 1024);
  }
}

TEST(Launch, OneRankFailingStopsTheOthersAndNamesIt) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch({"-n", "3", "--grace", "2", "--", "sh", "-c",
                   "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; sleep 50"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "the other ranks were not stopped";
  EXPECT_NE(r.err.find("rank 1 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 3"), std::string::npos) << r.err;
}

TEST(Launch, OneRankKilledIsReportedWithItsSignal) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch({"-n", "2", "--", "sh", "-c", "if [ $RANK = 0 ]; then kill -KILL $$; fi; sleep 50"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_NE(r.err.find("rank 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by SIGKILL"), std::string::npos) << r.err;
}

TEST(Launch, RanksThatIgnoreSigtermAreKilledAfterTheGrace) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch({"-n", "2", "--grace", "1", "--", "sh", "-c",
                   "if [ $RANK = 1 ]; then exit 4; fi; trap '' TERM; sleep 50"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
}

TEST(Launch, KeepGoingLetsTheOthersFinish) {
  auto r = launch({"-n", "3", "--keep-going", "--", "sh", "-c",
                   "if [ $RANK = 2 ]; then exit 5; fi; sleep 0.5; echo finished"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("[rank 0] finished"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] finished"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("exited with code 5"), std::string::npos) << r.err;
}

TEST(Launch, UsageErrorsExitWith2) {
  EXPECT_EQ(launch({"-n", "2", "--", "/nonexistent/command"}).exit_code, 2);
  EXPECT_EQ(launch({"-n", "0", "--", "true"}).exit_code, 2);
  EXPECT_EQ(launch({"--", "true"}).exit_code, 2);  // -n is required
  EXPECT_EQ(launch({"-n", "2"}).exit_code, 2);     // no command
}

}  // namespace
}  // namespace loom::test
