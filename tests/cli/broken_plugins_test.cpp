// SPDX-License-Identifier: Apache-2.0
// Each deliberately broken plugin (tests/fixtures) against the real `loom`
// binary: the listing names it with its reason and goes on; opening it by
// name exits with code 2 naming its path and the reason; nothing crashes.
#include <gtest/gtest.h>

#include "../support/subprocess.hpp"
#include "loom/plugin.h"
#include "test_paths.hpp"

// The host's newest minor ABI, as the messages print it.
#define LOOM_TEST_STR2(x) #x
#define LOOM_TEST_STR(x) LOOM_TEST_STR2(x)
#define LOOM_TEST_ABI_MINOR LOOM_TEST_STR(LOOM_ABI_MINOR)

namespace loom::test {
namespace {

struct Defect {
  const char* name;      // fixture file lib<name>_collective.so
  const char* expected;  // what the reason must say
  const char* listed;    // expected status word in the listing
};

// Names the case in ctest's output instead of gtest's byte dump.
void PrintTo(const Defect& d, std::ostream* os) { *os << d.name; }

const Defect kDefects[] = {
    {"notelf", "invalid ELF header", "broken"},
    {"noentry", "no entry point loom_collective_plugin_v1", "broken"},
    {"abinew", "plugin speaks ABI major 2 but this host speaks 1", "broken"},
    {"abiold", "plugin speaks ABI major 0 but this host speaks 1", "broken"},
    {"nullfn", "mandatory function allreduce is NULL", "broken"},
    {"noscaled", "declares scaled-allreduce but its vtable has no allreduce_scaled (struct_size 160, ABI 1.3 needs 168",
     "broken"},
    {"namemismatch", "plugin calls itself 'somethingelse' but its file is libnamemismatch_collective.so", "broken"},
    {"initfails", "fixture: cannot open /dev/loom0 (simulated failure)", "broken"},
    {"initcrash", "SIGSEGV", "broken"},
    {"refuses", "fixture speaks only ABI 1.99; this host speaks ABI 1.0 to 1." LOOM_TEST_ABI_MINOR, "broken"},
    {"vtableold",
     "the plugin chose ABI 1." LOOM_TEST_ABI_MINOR " but its collective vtable says it is laid out for ABI 1.0",
     "broken"},
    {"badabsent", "absent_ops has bits no operation owns (0x100000)", "broken"},
    {"badanswer", "plugin chose ABI 2.0 but this host speaks ABI 1.0 to 1." LOOM_TEST_ABI_MINOR, "broken"},
    {"nullvtable", "NULL vtable", "broken"},
    {"badoptname", "option 0 is named 'Bad-Name': option names must be [a-z0-9_]+", "broken"},
    {"dupoption", "option 'depth' is declared twice: option names must be unique within a plugin", "broken"},
    {"unavail", "fixture: no such device here", "unavailable"},
};

std::map<std::string, std::string> fixture_env() {
  return {{"LOOM_PLUGIN_PATH", std::string(kBrokenPluginDir) + ":" + kGoodPluginDir}, {"RANK", ""}, {"WORLD_SIZE", ""}};
}

std::string line_of(const std::string& text, const std::string& needle) {
  auto at = text.find(needle);
  if (at == std::string::npos) return {};
  auto begin = text.rfind('\n', at);
  auto end = text.find('\n', at);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1));
}

class BrokenPlugin : public ::testing::TestWithParam<Defect> {};

TEST_P(BrokenPlugin, IsListedWithItsReasonWhileOthersStillList) {
  const Defect& d = GetParam();
  auto r = run_process({kLoomBinary, "plugins"}, fixture_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string path = std::string(kBrokenPluginDir) + "/lib" + d.name + "_collective.so";
  std::string line = line_of(r.out, path);
  ASSERT_FALSE(line.empty()) << "not listed: " << path << "\n" << r.out;
  EXPECT_NE(line.find(std::string(d.listed) + ": "), std::string::npos) << line;
  EXPECT_NE(line.find(d.expected), std::string::npos) << line;
  // The good plugin is still listed as ok after every broken one.
  EXPECT_NE(line_of(r.out, "libgood_collective.so").find(" ok"), std::string::npos) << r.out;
}

TEST_P(BrokenPlugin, OpeningItByNameExitsWithCode2NamingPathAndReason) {
  const Defect& d = GetParam();
  auto r = run_process({kLoomBinary, "plugins", "check", d.name}, fixture_env());
  EXPECT_EQ(r.signal, 0) << "the host crashed";
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(std::string("/lib") + d.name + "_collective.so"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(d.expected), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BrokenPlugin, ::testing::ValuesIn(kDefects),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GoodPlugin, ChecksOkAndDescribesItself) {
  auto r = run_process({kLoomBinary, "plugins", "check", "good"}, fixture_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // The kit ran every rule on it: a table by rule, operation and dtype.
  EXPECT_NE(r.out.find("passed: collective 'good': "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Allreduce.Exact"), std::string::npos) << r.out;
  r = run_process({kLoomBinary, "plugins", "check", "good", "--quick"}, fixture_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("allreduce verified"), std::string::npos) << r.out;
  r = run_process({kLoomBinary, "plugins", "info", "good", "--json"}, fixture_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"state\": \"ok\""), std::string::npos) << r.out;
}

TEST(PluginsCommand, UnknownNameExitsWith2ListingWhatExists) {
  auto r = run_process({kLoomBinary, "plugins", "check", "nosuch"}, fixture_env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no plugin named 'nosuch'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("good (collective)"), std::string::npos) << r.err;
}

TEST(PluginsCommand, InfoOnABrokenPluginExitsWith2) {
  auto r = run_process({kLoomBinary, "plugins", "info", "nullfn"}, fixture_env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("mandatory function allreduce is NULL"), std::string::npos) << r.err;
}

TEST(PluginsCommand, JsonListingHasEveryFixture) {
  auto r = run_process({kLoomBinary, "plugins", "--json"}, fixture_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& d : kDefects) EXPECT_NE(r.out.find(std::string("\"name\": \"") + d.name + "\""), std::string::npos) << d.name;
}

TEST(PluginsCommand, UsageErrorsExitWith2) {
  EXPECT_EQ(run_process({kLoomBinary}).exit_code, 2);
  EXPECT_EQ(run_process({kLoomBinary, "frobnicate"}).exit_code, 2);
  EXPECT_EQ(run_process({kLoomBinary, "plugins", "info"}).exit_code, 2);
  EXPECT_EQ(run_process({kLoomBinary, "plugins", "info", "good", "--kind", "banana"}, fixture_env()).exit_code, 2);
  EXPECT_EQ(run_process({kLoomBinary, "plugins", "--config", "/nonexistent.toml"}).exit_code, 2);
}

// ABI 1.1 and 1.2 only appended: a plugin that chose 1.0 is listed, opened and run.
TEST(PluginsCommand, PluginBuiltForAbi10StillWorks) {
  auto r = run_process({kLoomBinary, "plugins"}, fixture_env());
  const std::string line = line_of(r.out, "libabi10_collective.so");
  EXPECT_NE(line.find(" 1.0 "), std::string::npos) << r.out;
  EXPECT_NE(line.find(" ok"), std::string::npos) << r.out;
  auto check = run_process({kLoomBinary, "plugins", "check", "abi10"}, fixture_env());
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST(PluginsCommand, VersionPrintsVersionAndAbi) {
  auto r = run_process({kLoomBinary, "--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("plugin ABI 1." LOOM_TEST_ABI_MINOR), std::string::npos) << r.out;
}

}  // namespace
}  // namespace loom::test
