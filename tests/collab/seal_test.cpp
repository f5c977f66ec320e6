// SPDX-License-Identifier: Apache-2.0
// Sealer (seal.h) and the swarm key file (plugins/common/swarm_key.h).
#include "seal.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace loom_collab {
namespace {

loom_key::SwarmKey key_of(uint8_t fill) {
  loom_key::SwarmKey k;
  k.fill(fill);
  return k;
}

Bytes bytes(const std::string &s) { return Bytes(s.begin(), s.end()); }

TEST(Sealer, OpensWhatItSealedAndNothingElse) {
  Sealer a(key_of(1)), same(key_of(1)), other(key_of(2));
  const Bytes msg = bytes("a progress record"), ad = bytes("envelope+location");
  const Bytes sealed = a.seal(msg.data(), msg.size(), ad.data(), ad.size());
  EXPECT_EQ(sealed.size(), msg.size() + Sealer::kOverhead);
  Bytes out;
  ASSERT_TRUE(same.open(sealed.data(), sealed.size(), ad.data(), ad.size(), &out));
  EXPECT_EQ(out, msg);
  // Another key, other associated data, any flipped bit or a cut: refused.
  EXPECT_FALSE(other.open(sealed.data(), sealed.size(), ad.data(), ad.size(), &out));
  const Bytes moved = bytes("envelope+elsewhere");
  EXPECT_FALSE(a.open(sealed.data(), sealed.size(), moved.data(), moved.size(), &out));
  for (size_t i = 0; i < sealed.size(); ++i) {
    Bytes bad = sealed;
    bad[i] ^= 0x01;
    EXPECT_FALSE(a.open(bad.data(), bad.size(), ad.data(), ad.size(), &out)) << "bit flipped in byte " << i;
  }
  for (size_t n : {size_t(0), Sealer::kOverhead - 1, sealed.size() - 1})
    EXPECT_FALSE(a.open(sealed.data(), n, ad.data(), ad.size(), &out)) << n << " bytes";
  // A fresh nonce each time: the same record never seals to the same bytes.
  EXPECT_NE(a.seal(msg.data(), msg.size(), ad.data(), ad.size()), sealed);
}

TEST(Sealer, LocationsDependOnTheKeyAndTheName) {
  Sealer a(key_of(1)), same(key_of(1)), other(key_of(2));
  EXPECT_EQ(a.location("loom/run/progress"), same.location("loom/run/progress"));
  EXPECT_NE(a.location("loom/run/progress"), other.location("loom/run/progress"));
  EXPECT_NE(a.location("loom/run/progress"), a.location("loom/run2/progress"));
}

TEST(Sealer, EachUseHasASubkeyOfItsOwn) {
  const auto k = key_of(7);
  const Subkey uses[] = {Subkey::location, Subkey::seal, Subkey::proof, Subkey::stream};
  for (Subkey a : uses) {
    EXPECT_EQ(derive_subkey(k, a), derive_subkey(k, a));
    EXPECT_NE(derive_subkey(k, a), derive_subkey(key_of(8), a));
    for (Subkey b : uses) {
      if (a != b) {
        EXPECT_NE(derive_subkey(k, a), derive_subkey(k, b));
      }
    }
  }
}

class KeyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-key-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string write(const std::string &name, const std::string &text, mode_t mode) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir;
};

TEST_F(KeyFile, WrittenWithMode0600AndReadBack) {
  const std::string path = dir + "/swarm.key";
  std::string why;
  bool exists = true;
  ASSERT_TRUE(loom_key::write_new_key(path, &why, &exists)) << why;
  EXPECT_FALSE(exists);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  loom_key::SwarmKey k{};
  ASSERT_TRUE(loom_key::read_key(path, &k, &why)) << why;
  EXPECT_NE(k, loom_key::SwarmKey{}) << "a key of zeros";
  // Never overwritten; a second key differs.
  EXPECT_FALSE(loom_key::write_new_key(path, &why, &exists));
  EXPECT_TRUE(exists);
  EXPECT_NE(why.find("never overwritten"), std::string::npos) << why;
  loom_key::SwarmKey k2{};
  ASSERT_TRUE(loom_key::write_new_key(dir + "/second.key", &why, &exists)) << why;
  ASSERT_TRUE(loom_key::read_key(dir + "/second.key", &k2, &why)) << why;
  EXPECT_NE(k, k2);
}

TEST_F(KeyFile, BadFilesAreRefusedNamingWhatIsWrong) {
  const std::string hex(64, 'a');
  struct Case {
    std::string path, expect;
  };
  const Case cases[] = {
      {dir + "/missing.key", "cannot read swarm key"},
      {write("open.key", "loom-swarm-key 1\n" + hex + "\n", 0644), "may be read by group or others (mode 0644)"},
      {write("short.key", "loom-swarm-key 1\n" + hex.substr(2) + "\n", 0600), "is not a swarm key"},
      {write("nothex.key", "loom-swarm-key 1\n" + std::string(63, 'a') + "g\n", 0600), "is not a swarm key"},
      {write("header.key", "loom-swarm-key 2\n" + hex + "\n", 0600), "is not a swarm key"},
      {write("trailing.key", "loom-swarm-key 1\n" + hex + "\nmore\n", 0600), "is not a swarm key"},
      {write("empty.key", "", 0600), "is not a swarm key"},
      {dir, "not a regular file"},
  };
  for (const auto &c : cases) {
    loom_key::SwarmKey k;
    std::string why;
    EXPECT_FALSE(loom_key::read_key(c.path, &k, &why)) << c.path;
    EXPECT_NE(why.find(c.expect), std::string::npos) << c.path << ": " << why;
  }
  loom_key::SwarmKey k;
  std::string why;
  EXPECT_TRUE(loom_key::read_key(write("ok.key", "loom-swarm-key 1\n" + hex, 0400), &k, &why)) << why;
  EXPECT_EQ(k, key_of(0xaa));
}

}  // namespace
}  // namespace loom_collab
