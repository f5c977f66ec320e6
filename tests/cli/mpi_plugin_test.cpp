// SPDX-License-Identifier: Apache-2.0
// The MPI plugin as users meet it through `loom`: available under mpirun,
// unavailable (with the reason and the fix) when WORLD_SIZE asks for more
// ranks than MPI has.
#include <regex>
#include <gtest/gtest.h>

#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

const std::map<std::string, std::string> kAlone = {{"RANK", ""}, {"WORLD_SIZE", ""}, {"LOOM_PLUGIN_PATH", ""}};

TEST(MpiPlugin, ListedOkWhenAlone) {
  auto r = run_process({kLoomBinary, "plugins"}, kAlone);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Columns are padded to the longest path: any run of spaces before the status.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("libmpi_collective\\.so +ok"))) << r.out;
}

TEST(MpiPlugin, UnavailableWhenWorldSizeExceedsMpiRanks) {
  auto env = kAlone;
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "4";
  auto r = run_process({kLoomBinary, "plugins"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("unavailable: WORLD_SIZE asks for 4 ranks but MPI has 1"), std::string::npos) << r.out;
  r = run_process({kLoomBinary, "plugins", "check", "mpi"}, env);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("libmpi_collective.so) is unavailable here"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mpirun -np 4"), std::string::npos) << r.err;
}

TEST(MpiPlugin, ChecksARealAllreduceOnThreeRanks) {
  auto r = run_process({kMpirun, "--oversubscribe", "--allow-run-as-root", "-np", "3", kLoomBinary, "plugins", "check", "mpi"},
                       kAlone, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("3 rank(s), allreduce verified"), std::string::npos) << r.out;
}

TEST(MpiPlugin, InfoListsItsOptions) {
  auto r = run_process({kLoomBinary, "plugins", "info", "mpi", "--json"}, kAlone);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"name\": \"timeout_ms\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"abort\""), std::string::npos) << r.out;
}

TEST(MpiPlugin, UnknownOptionInAConfigIsAUsageErrorListingValidOnes) {
  char path[] = "/tmp/loom-mpi-config-XXXXXX";
  close(mkstemp(path));
  FILE* f = fopen(path, "w");
  fputs("[collective]\nname = \"mpi\"\n[collective.options]\ntimeout = 5\n", f);
  fclose(f);
  auto r = run_process({kLoomBinary, "--config", path, "plugins", "check", "mpi"}, kAlone);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(std::string(path) + ":4: unknown option 'timeout'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("valid options: timeout_ms"), std::string::npos) << r.err;
  std::remove(path);
}

}  // namespace
}  // namespace loom::test
