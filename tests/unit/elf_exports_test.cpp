// SPDX-License-Identifier: Apache-2.0
// The loader's ELF .dynsym reader: what real plugin files export, and no crash
// on truncated or corrupted copies of one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "../../core/src/elf_exports.hpp"
#include "test_paths.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct ScratchFile {
  std::string path;
  ScratchFile() {
    char tmpl[] = "/tmp/loom-elf-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd);
    path = tmpl;
  }
  ~ScratchFile() { fs::remove(path); }
  void write(const std::string& bytes) const { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
};

const std::string kGood = std::string(kGoodPluginDir) + "/libgood_collective.so";

TEST(PluginElfExports, AGoodPluginExportsItsEntryOnly) {
  std::vector<std::string> symbols;
  std::string error;
  ASSERT_TRUE(elf_exported_symbols(kGood, &symbols, &error)) << error;
  EXPECT_EQ(symbols, std::vector<std::string>{"loom_collective_plugin_v1"});
  EXPECT_TRUE(extra_plugin_exports(kGood).empty());
}

TEST(PluginElfExports, HelpersExportedBesidesTheEntryAreExtra) {
  auto extra = extra_plugin_exports(std::string(kBrokenPluginDir) + "/libextraexports_collective.so");
  std::sort(extra.begin(), extra.end());
  EXPECT_EQ(extra, (std::vector<std::string>{"fixture_helper_add", "fixture_helper_negate", "fixture_helper_scale",
                                             "fixture_helper_table"}));
}

// cmake/plugin.map names the entry symbols exactly; a glob exported this one.
TEST(PluginElfExports, TheSdkVersionScriptHidesEntryLookalikes) {
  EXPECT_TRUE(extra_plugin_exports(std::string(kGoodPluginDir) + "/liblookalike_collective.so").empty());
}

TEST(PluginElfExports, NoElfFilesAreRefusedWithAReason) {
  std::vector<std::string> symbols;
  std::string error;
  EXPECT_FALSE(elf_exported_symbols("/nonexistent/libx_collective.so", &symbols, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  EXPECT_FALSE(elf_exported_symbols(std::string(kBrokenPluginDir) + "/libnotelf_collective.so", &symbols, &error));
  EXPECT_EQ(error, "not an ELF file");
  EXPECT_FALSE(elf_exported_symbols(kGoodPluginDir, &symbols, &error));  // a folder
  ScratchFile file;
  std::string bytes = read_file(kGood);
  bytes[4] = 1;  // ELFCLASS32
  file.write(bytes);
  EXPECT_FALSE(elf_exported_symbols(file.path, &symbols, &error));
  EXPECT_NE(error.find("not a 64-bit ELF file"), std::string::npos) << error;
  EXPECT_TRUE(extra_plugin_exports(file.path).empty());
}

TEST(PluginElfExports, TruncatedCopiesNeverCrash) {
  const std::string bytes = read_file(kGood);
  ASSERT_GT(bytes.size(), 4096u);
  ScratchFile file;
  std::vector<std::string> symbols;
  std::string error;
  size_t refused = 0;
  for (size_t size = 0; size < bytes.size(); size += (size < 128 ? 1 : 509)) {
    file.write(bytes.substr(0, size));
    if (!elf_exported_symbols(file.path, &symbols, &error)) ++refused;
  }
  // The section headers sit at the end: cut copies lose them.
  EXPECT_GT(refused, 0u);
}

TEST(PluginElfExports, CorruptedHeadersAndTablesNeverCrash) {
  const std::string bytes = read_file(kGood);
  ScratchFile file;
  std::mt19937 random(20240611);
  std::vector<std::string> symbols;
  std::string error;
  // Overwrite bytes in the ELF header, the section header table and the
  // rest at random, several at a time, with random and extreme values.
  uint64_t shoff = 0;  // e_shoff
  std::memcpy(&shoff, bytes.data() + 0x28, sizeof shoff);
  ASSERT_LT(shoff, bytes.size());
  for (int round = 0; round < 1500; ++round) {
    std::string copy = bytes;
    for (int i = 0; i < 4; ++i) {
      size_t at = round % 3 == 0 ? random() % 64 : round % 3 == 1 ? shoff + random() % (bytes.size() - shoff)
                                                                  : random() % bytes.size();
      const char values[] = {'\0', '\x7f', '\xff', static_cast<char>(random())};
      copy[at] = values[random() % 4];
      if (at + 8 <= copy.size() && random() % 4 == 0) std::fill_n(copy.begin() + at, 8, '\xff');
    }
    file.write(copy);
    elf_exported_symbols(file.path, &symbols, &error);
    extra_plugin_exports(file.path);
  }
  SUCCEED();
}

}  // namespace
}  // namespace loom
