// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "loom/host.hpp"
#include "loom/plugin_path.hpp"
#include "test_paths.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/loom-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const std::string& value) : name(n) { setenv(n, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

TEST(PluginFileName, SplitsNameAndKind) {
  std::string name;
  loom_kind kind = 0;
  EXPECT_TRUE(parse_plugin_file_name("libucx_collective.so", &name, &kind));
  EXPECT_EQ(name, "ucx");
  EXPECT_EQ(kind, LOOM_KIND_COLLECTIVE);
  EXPECT_TRUE(parse_plugin_file_name("libcollab_strategy.so", &name, &kind));
  EXPECT_EQ(name, "collab");
  EXPECT_EQ(kind, LOOM_KIND_STRATEGY);
  EXPECT_TRUE(parse_plugin_file_name("libmy_fast_collective.so", &name, &kind));
  EXPECT_EQ(name, "my_fast");
  EXPECT_FALSE(parse_plugin_file_name("libloom.so", &name, &kind));
  EXPECT_FALSE(parse_plugin_file_name("lib_collective.so", &name, &kind));
  EXPECT_FALSE(parse_plugin_file_name("ucx_collective.so", &name, &kind));
  EXPECT_FALSE(parse_plugin_file_name("libucx_collective.so.1", &name, &kind));
}

TEST(SearchPath, FollowsDesignOrder) {
  ScopedEnv env("LOOM_PLUGIN_PATH", "/env/a:/env/b");
  auto dirs = plugin_search_path({"/cli/a:/cli/b"}, {"/config/a"});
  ASSERT_EQ(dirs.size(), 6u);
  EXPECT_EQ(dirs[0].path, "/cli/a");
  EXPECT_EQ(dirs[0].origin, "--plugin-path");
  EXPECT_EQ(dirs[1].path, "/cli/b");
  EXPECT_EQ(dirs[2].path, "/config/a");
  EXPECT_EQ(dirs[3].path, "/env/a");
  EXPECT_EQ(dirs[3].origin, "LOOM_PLUGIN_PATH");
  EXPECT_EQ(dirs[4].path, "/env/b");
  EXPECT_EQ(dirs[5].origin, "libloom");
  EXPECT_EQ(fs::weakly_canonical(dirs[5].path), fs::weakly_canonical(kBuildPluginDir));
}

TEST(SearchPath, RelativeEntriesBecomeAbsoluteAndDuplicatesGo) {
  ScopedEnv env("LOOM_PLUGIN_PATH", kBuildPluginDir);
  auto dirs = plugin_search_path({"rel/dir"}, {});
  ASSERT_EQ(dirs.size(), 2u);  // the env entry and libloom's folder are the same folder
  EXPECT_EQ(dirs[0].path, fs::current_path().string() + "/rel/dir");
  EXPECT_EQ(dirs[1].origin, "LOOM_PLUGIN_PATH");
}

TEST(Discovery, FirstFolderWinsAndLaterCopiesAreShadowed) {
  TempDir first, second;
  const fs::path good = fs::path(kGoodPluginDir) / "libgood_collective.so";
  fs::copy_file(good, first.path / "libgood_collective.so");
  fs::copy_file(good, second.path / "libgood_collective.so");
  std::ofstream(second.path / "README.txt") << "not a plugin";
  HostConfig config;
  config.search_path = {{first.path.string(), "test"}, {second.path.string(), "test"}};
  Host host(config, JobInfo{});
  ASSERT_EQ(host.candidates().size(), 2u);
  ASSERT_NE(host.find(LOOM_KIND_COLLECTIVE, "good"), nullptr);
  EXPECT_EQ(host.find(LOOM_KIND_COLLECTIVE, "good")->path, (first.path / "libgood_collective.so").string());
  auto records = host.probe_all();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].state, PluginRecord::State::kOk) << records[0].reason;
  EXPECT_EQ(records[1].state, PluginRecord::State::kShadowed);
  EXPECT_NE(records[1].reason.find(first.path.string()), std::string::npos);
}

TEST(Discovery, MissingFoldersAreSkipped) {
  HostConfig config;
  config.search_path = {{"/nonexistent/loom", "test"}, {kGoodPluginDir, "test"}};
  Host host(config, JobInfo{});
  EXPECT_EQ(host.names(LOOM_KIND_COLLECTIVE), (std::vector<std::string>{"abi10", "good", "lookalike", "partial"}));
}

}  // namespace
}  // namespace loom
