// SPDX-License-Identifier: Apache-2.0
// Plugins that load but should not pass in silence, against the real `loom`
// binary: a misspelt kind in a file name, symbols exported besides the entry
// point, unsafe permissions or owner; and the info line naming the file a
// `loom train` run opened.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    char tmpl[] = "/tmp/loom-hygiene-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~ScratchDir() {
    chmod(path.c_str(), 0700);
    fs::remove_all(path);
  }
  // A copy of the good fixture plugin under file_name; returns its path.
  std::string good_copy(const std::string& file_name = "libgood_collective.so") const {
    fs::copy_file(fs::path(kGoodPluginDir) / "libgood_collective.so", path / file_name);
    chmod((path / file_name).c_str(), 0755);
    return (path / file_name).string();
  }
};

// No job, no LOOM_PLUGIN_PATH: only the folder given and the build's own.
const std::map<std::string, std::string> kPlain = {{"LOOM_PLUGIN_PATH", ""}, {"RANK", ""}, {"WORLD_SIZE", ""}};

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(PluginHygiene, MisspeltKindIsNamedWithTheValidKinds) {
  ScratchDir dir;
  dir.good_copy("libx_colective.so");
  dir.good_copy("libgood_collective.so");
  std::ofstream(dir.path / "libhelper.so") << "a library, not a plugin";
  std::ofstream(dir.path / "notes_x.txt") << "not a plugin";
  auto r = run_process({kLoomBinary, "plugins", "--plugin-path", dir.path.string()}, kPlain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("[warning] plugin folder " + dir.path.string() +
                       ": skipping libx_colective.so: it looks like a plugin, but 'colective' is not a plugin kind "
                       "(valid kinds: collective, strategy; plugin files are named lib<name>_<kind>.so)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("libhelper.so"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("notes_x"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("libx_colective.so"), std::string::npos) << r.out;
  // The JSON listing carries the scan's warnings too.
  r = run_process({kLoomBinary, "plugins", "--json", "--plugin-path", dir.path.string()}, kPlain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"warnings\": [\n    \"plugin folder " + dir.path.string() + ": skipping libx_colective.so: it looks"),
            std::string::npos)
      << r.out;
}

TEST(PluginHygiene, ExtraExportsWarnButTheListingAndCheckStillWork) {
  const std::map<std::string, std::string> env = {{"LOOM_PLUGIN_PATH", std::string(kBrokenPluginDir) + ":" + kGoodPluginDir},
                                                  {"RANK", ""}, {"WORLD_SIZE", ""}};
  const std::string path = std::string(kBrokenPluginDir) + "/libextraexports_collective.so";
  auto r = run_process({kLoomBinary, "plugins"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string warning = "[warning] plugin file " + path +
                              " exports 4 symbol(s) besides its entry point loom_collective_plugin_v1: fixture_helper_";
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("and 1 more; build it with -fvisibility=hidden and link it with the Loom SDK's version script"),
            std::string::npos)
      << r.err;
  // What the linker adds is not the plugin's doing.
  EXPECT_EQ(r.err.find("_edata"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("__bss_start"), std::string::npos) << r.err;
  // It works, so it is listed ok; and no other plugin, in-tree ones
  // included, exports anything besides its entry point.
  auto at = r.out.find(path);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string status = r.out.substr(at + path.size(), r.out.find('\n', at) - at - path.size());
  EXPECT_EQ(status.substr(status.find_first_not_of(' ')), "ok") << r.out;
  EXPECT_EQ(count(r.err, "besides its entry point"), 1u) << r.err;
  EXPECT_NE(r.out.find(std::string(kBuildPluginDir) + "/libddp_strategy.so"), std::string::npos) << r.out;

  auto check = run_process({kLoomBinary, "plugins", "check", "extraexports"}, env);
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.err.find(warning), std::string::npos) << check.err;
}

TEST(PluginHygiene, WorldWritableFolderWarnsWithOrWithoutTheStickyBit) {
  for (mode_t mode : {mode_t(0777), mode_t(01777)}) {
    ScratchDir dir;
    dir.good_copy();
    ASSERT_EQ(chmod(dir.path.c_str(), mode), 0);
    const std::string folder = dir.path.string();
    const std::string warning = "[warning] plugin folder " + folder + " is world-writable (mode " +
                                (mode == 0777 ? "0777)" : "1777, sticky)") +
                                ": any user can put a plugin there that loom would load; make it writable by its "
                                "owner only (chmod o-w " + folder + ")";
    auto r = run_process({kLoomBinary, "plugins", "--plugin-path", folder}, kPlain);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
    // Loading it (not only listing) warns in the host's log.
    r = run_process({kLoomBinary, "plugins", "check", "good", "--plugin-path", folder}, kPlain);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
    EXPECT_EQ(count(r.err, "is world-writable"), 1u) << r.err;
  }
}

TEST(PluginHygiene, AFileOfAnotherOwnerOrWritableByAllWarns) {
  ScratchDir dir;
  const std::string path = dir.good_copy();
  const std::string folder = dir.path.string();
  // A safe copy: our own, in our own folder, writable by us only.
  auto r = run_process({kLoomBinary, "plugins", "check", "good", "--plugin-path", folder}, kPlain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("[warning]"), std::string::npos) << r.err;

  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  r = run_process({kLoomBinary, "plugins", "--plugin-path", folder}, kPlain);
  EXPECT_NE(r.err.find("[warning] plugin file " + path + " is world-writable (mode 0666): any user can change the code "
                       "loom runs; chmod o-w " + path),
            std::string::npos)
      << r.err;
  ASSERT_EQ(chmod(path.c_str(), 0755), 0);

  if (geteuid() != 0) GTEST_SKIP() << "only root can give the copy to another user";
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  const std::string warning = "[warning] plugin file " + path + " is owned by uid 65534, neither this user (uid 0) nor "
                              "root: its owner can change the code loom runs";
  r = run_process({kLoomBinary, "plugins", "--plugin-path", folder}, kPlain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  r = run_process({kLoomBinary, "plugins", "check", "good", "--plugin-path", folder}, kPlain);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
}

// The files a run uses show in its log at the default (info) level, not
// only at debug: which of several copies in the plugin path won matters.
TEST(PluginHygiene, TrainLogsEachPluginFileItOpensAtInfoLevel) {
  ScratchDir dir;
  const std::string cfg = (dir.path / "t.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\nmax_steps = 2\nbatch_size = 8\nthreads = 1\noutput_dir = \""
                     << (dir.path / "run").string() << "\"\n[task]\nsamples = 64\nhidden = 8\n"
                     << "[strategy]\nname = \"ddp\"\n[collective]\nname = \"good\"\n";
  auto r = run_process({kLoomBinary, "train", cfg, "--plugin-path", kGoodPluginDir}, kPlain, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string abi = "(ABI 1.";
  EXPECT_NE(r.err.find("[info] opened strategy plugin 'ddp' (" + std::string(kBuildPluginDir) +
                       "/libddp_strategy.so) version "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("[info] opened collective plugin 'good' (" + std::string(kGoodPluginDir) +
                       "/libgood_collective.so) version 0.1.0 " + abi),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace loom::test
