// SPDX-License-Identifier: Apache-2.0
// The peer's cache of verified progress records (verified_progress.h): the
// same bytes are checked once, anything else is checked afresh, and a
// refused record is never kept.
#include <gtest/gtest.h>

#include "identity.h"
#include "verified_progress.h"

namespace loom_collab {
namespace {

const uint64_t kRun = run_hash("verified-progress-test");

Bytes record_of(const Identity &signer, int64_t time_ms, uint64_t samples) {
  ProgressRecord r;
  r.peer_id = signer.id();
  r.epoch = 3;
  r.samples = samples;
  r.time_ms = time_ms;
  r.state_host = "10.0.0.7";
  r.state_port = 7000;
  return encode(kRun, r, signer);
}

TEST(VerifiedProgress, TheSameBytesAreCheckedOnceAndDecodeAlike) {
  const Identity peer;
  VerifiedProgress cache;
  const Bytes b = record_of(peer, 1000, 64);
  std::string why;
  auto first = cache.decode(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(first) << why;
  auto again = cache.decode(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(again);
  EXPECT_EQ(cache.checks(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(again->peer_id, peer.id());
  EXPECT_EQ(again->samples, 64u);
  EXPECT_EQ(again->time_ms, 1000);
  EXPECT_EQ(again->state_host, "10.0.0.7");
  EXPECT_EQ(again->fingerprint, first->fingerprint);
  // The peer's next record is other bytes: checked.
  const Bytes next = record_of(peer, 2000, 128);
  auto later = cache.decode(kRun, next.data(), next.size(), &why);
  ASSERT_TRUE(later) << why;
  EXPECT_EQ(later->samples, 128u);
  EXPECT_EQ(cache.checks(), 2u);
}

TEST(VerifiedProgress, ABitChangedIsCheckedAndRefusedAndNeverKept) {
  const Identity peer;
  VerifiedProgress cache;
  const Bytes good = record_of(peer, 1000, 64);
  std::string why;
  ASSERT_TRUE(cache.decode(kRun, good.data(), good.size(), &why)) << why;
  // Every byte of the record, flipped in turn: none passes as the cached one.
  for (size_t i = 0; i < good.size(); ++i) {
    Bytes bad = good;
    bad[i] ^= 0x10;
    why.clear();
    EXPECT_FALSE(cache.decode(kRun, bad.data(), bad.size(), &why)) << "byte " << i;
    EXPECT_FALSE(why.empty()) << "byte " << i;
  }
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.size(), 1u);  // the good one alone
  // A refused record is checked again at every copy.
  Bytes bad = good;
  bad[bad.size() / 2] ^= 1;
  const uint64_t before = cache.checks();
  EXPECT_FALSE(cache.decode(kRun, bad.data(), bad.size(), &why));
  EXPECT_FALSE(cache.decode(kRun, bad.data(), bad.size(), &why));
  EXPECT_EQ(cache.checks(), before + 2);
}

TEST(VerifiedProgress, AnotherRunsRecordIsNeverTakenFromTheCache) {
  const Identity peer;
  VerifiedProgress cache;
  const Bytes b = record_of(peer, 1000, 64);
  std::string why;
  ASSERT_TRUE(cache.decode(kRun, b.data(), b.size(), &why)) << why;
  EXPECT_FALSE(cache.decode(run_hash("another-run"), b.data(), b.size(), &why));
  EXPECT_NE(why.find("run"), std::string::npos) << why;
  EXPECT_EQ(cache.hits(), 0u);
}

TEST(VerifiedProgress, HoldsAtMostTwoGenerationsAndKeepsWhatIsReadAgain) {
  const Identity peer;
  VerifiedProgress cache(4);
  std::string why;
  const Bytes kept = record_of(peer, 1, 64);
  ASSERT_TRUE(cache.decode(kRun, kept.data(), kept.size(), &why)) << why;
  for (int64_t t = 2; t <= 40; ++t) {
    const Bytes b = record_of(peer, t, 64);
    ASSERT_TRUE(cache.decode(kRun, b.data(), b.size(), &why)) << why;
    EXPECT_LE(cache.size(), 8u);
    // Read again every third record: it moves to the newest generation.
    if (t % 3 == 0) {
      ASSERT_TRUE(cache.decode(kRun, kept.data(), kept.size(), &why));
    }
  }
  const uint64_t hits = cache.hits();
  ASSERT_TRUE(cache.decode(kRun, kept.data(), kept.size(), &why));
  EXPECT_EQ(cache.hits(), hits + 1) << "a record read again and again was dropped";
  // One read once, long ago, is gone: checked again.
  const Bytes old = record_of(peer, 2, 64);
  const uint64_t checks = cache.checks();
  ASSERT_TRUE(cache.decode(kRun, old.data(), old.size(), &why));
  EXPECT_EQ(cache.checks(), checks + 1);
}

}  // namespace
}  // namespace loom_collab
