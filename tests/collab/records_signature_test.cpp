// SPDX-License-Identifier: Apache-2.0
// Record signatures (records.h, identity.h): peer ids from public keys, and
// every record that speaks for another peer, or whose signature does not
// verify, refused with its reason.
#include <gtest/gtest.h>

#include "records.h"
#include "records_support.hpp"

namespace loom_collab {
namespace {

using namespace records_test;

TEST(Records, PeerIdsDeriveFromPublicKeys) {
  const Identity a, b;
  EXPECT_NE(a.id(), b.id());
  EXPECT_NE(a.id(), 0u);
  EXPECT_EQ(peer_id_of(a.public_key()), a.id());
  PublicKey other = a.public_key();
  other[0] ^= 1;
  EXPECT_NE(peer_id_of(other), a.id());
}

TEST(Records, EveryKindDecodesItsSigner) {
  const Identity other;
  OobRecord o = sample_oob();
  const Bytes b = encode(kRun, o, other);
  std::string why;
  auto back = decode_oob(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->signer, other.id());  // the group reads a rank's part only from that member
}

TEST(Records, ARecordThatSpeaksForAnotherPeerIsRejectedAsForged) {
  const Identity victim;
  const std::string forged = " is not its signer: signed by peer " + std::to_string(me().id()) + " (forged)";
  std::string why;
  // Progress: the victim's id in the payload, signed by this test's key.
  const Bytes p = frame(1, progress_payload("host", 1.0, 1, 0, victim.id()));
  EXPECT_FALSE(decode_progress(kRun, p.data(), p.size(), &why));
  EXPECT_EQ(why, "peer " + std::to_string(victim.id()) + forged);
  // Join: the same.
  Frame j;
  j.u64(victim.id());
  j.u64(1);
  j.u32(0);
  j.u64(0);
  j.u64(0);  // kept: none
  j.u32(0);
  const Bytes jb = frame(2, j.b);
  EXPECT_FALSE(decode_join(kRun, jb.data(), jb.size(), &why));
  EXPECT_EQ(why, "peer " + std::to_string(victim.id()) + forged);
  // Group: a leader that did not sign it.
  GroupRecord g = sample_group();
  g.leader = victim.id();
  const Bytes gb = frame(3, group_payload_of(g, "", 0));
  EXPECT_FALSE(decode_group(kRun, gb.data(), gb.size(), &why));
  EXPECT_EQ(why, "leader " + std::to_string(victim.id()) + forged);
  // And encode never makes one.
  ProgressRecord q = sample_progress();
  q.peer_id = victim.id();
  EXPECT_THROW(encode(kRun, q, me()), std::invalid_argument);
  JoinRecord jr{victim.id(), 1, 0, 0};
  EXPECT_THROW(encode(kRun, jr, me()), std::invalid_argument);
  EXPECT_THROW(encode(kRun, g, me()), std::invalid_argument);
}

TEST(Records, ASignatureThatDoesNotMatchIsRejected) {
  const Identity victim;
  for (const Kind &k : all_kinds()) {
    // Someone else's public key put in place of the signer's (the CRC made
    // good again): the signature no longer verifies.
    Bytes swapped = k.valid;
    std::copy(victim.public_key().begin(), victim.public_key().end(), swapped.end() - 100);
    fix_crc(swapped);
    EXPECT_EQ(rejection(k, swapped),
              "bad signature: not signed by the key it carries (that of peer " + std::to_string(victim.id()) + ")")
        << k.name;
    // A payload changed after signing, CRC made good.
    Bytes altered = k.valid;
    altered[18] ^= 1;
    fix_crc(altered);
    EXPECT_NE(rejection(k, altered).find("bad signature"), std::string::npos) << k.name;
    // A damaged signature.
    Bytes damaged = k.valid;
    damaged[damaged.size() - 10] ^= 0x40;
    fix_crc(damaged);
    EXPECT_NE(rejection(k, damaged).find("bad signature"), std::string::npos) << k.name;
  }
}
}  // namespace
}  // namespace loom_collab
