// SPDX-License-Identifier: Apache-2.0
// A third party's partial collective (tests/fixtures, FIXTURE_PARTIAL): it
// offers allreduce, broadcast and barrier, declares the rest absent
// (absent_ops, ABI 1.7) and leaves their entries NULL. The host lists it ok
// with its operations, and the conformance kit passes it, reporting every
// absent operation's cases as skipped, never calling them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

std::map<std::string, std::string> partial_env() {
  return {{"LOOM_PLUGIN_PATH", kGoodPluginDir}, {"RANK", ""}, {"WORLD_SIZE", ""}};
}

TEST(PartialPlugin, ListedOkWithItsOperations) {
  auto r = run_process({kLoomBinary, "plugins", "info", "partial"}, partial_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Operations:   allreduce, broadcast, barrier  (absent: reduce, allgather, reduce_scatter, "
                       "alltoall, send/recv)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Status:       ok"), std::string::npos) << r.out;
  r = run_process({kLoomBinary, "plugins", "info", "partial", "--json"}, partial_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("operations"), nlohmann::json({"allreduce", "broadcast", "barrier"}));
  EXPECT_EQ(j.at("absent_operations"),
            nlohmann::json({"reduce", "allgather", "reduce_scatter", "alltoall", "send/recv"}));
  // The in-tree check (one allreduce) runs on what it offers.
  r = run_process({kLoomBinary, "plugins", "check", "partial"}, partial_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(PartialPlugin, PassesTheKitWithAbsentOperationsSkipped) {
  auto r = run_process({kConformanceBinary, "--plugin", "partial", "--plugin-path", kGoodPluginDir}, partial_env());
  const std::string all = r.out + r.err;
  EXPECT_EQ(r.exit_code, 0) << all;
  EXPECT_EQ(all.find("[  FAILED  ]"), std::string::npos) << all;
  for (const char* op : {"reduce", "allgather", "reduce_scatter", "alltoall", "send/recv"}) {
    EXPECT_NE(all.find(std::string("declared absent by the plugin: ") + op + "\n"), std::string::npos)
        << op << " was not reported as skipped\n"
        << all;
  }
  // What it offers ran, and the host refused every absent operation itself.
  EXPECT_NE(all.find("[       OK ] Allreduce.Exact/"), std::string::npos) << all;
  EXPECT_NE(all.find("[       OK ] Broadcast.Exact/"), std::string::npos) << all;
  EXPECT_NE(all.find("[       OK ] DeclaredAbsent.RefusedByTheHost"), std::string::npos) << all;
}

}  // namespace
}  // namespace loom::test
