// SPDX-License-Identifier: Apache-2.0
// Whether a joiner keeps a donor's state (state_check.h): every verdict,
// from the votes the other peers published for the state's epoch.
#include <gtest/gtest.h>

#include "state_check.h"

namespace loom_collab {
namespace {

constexpr uint64_t kHonest = 0xAAA, kPoisoned = 0xBAD, kDonor = 7;

StateCheck check(uint64_t digest, std::map<uint64_t, size_t> votes, size_t others, size_t reached,
                 int64_t epoch = 20, int64_t others_top = 21) {
  StateCheck c;
  c.epoch = epoch;
  c.donor = kDonor;
  c.digest = digest;
  c.votes.votes = std::move(votes);
  c.votes.others = others;
  c.votes.others_reached = reached;
  c.others_top = others_top;
  c.others_fresh = true;
  c.every = 10;
  return c;
}

TEST(StateCheck, TheHashMostOtherPeersPublishedIsKept) {
  const Judgement j = judge(check(kHonest, {{kHonest, 2}}, 2, 2));
  EXPECT_EQ(j.verdict, Verdict::keep);
  EXPECT_NE(j.why.find("matches the parameters' hash that 2 of the 2 other peers published"), std::string::npos)
      << j.why;
  // One other peer is enough when it is the only one.
  EXPECT_EQ(judge(check(kHonest, {{kHonest, 1}}, 1, 1)).verdict, Verdict::keep);
  // A majority decides before the rest have published.
  EXPECT_EQ(judge(check(kHonest, {{kHonest, 2}}, 3, 2)).verdict, Verdict::keep);
}

TEST(StateCheck, APoisonedStateIsRefused) {
  const Judgement j = judge(check(kPoisoned, {{kHonest, 2}}, 2, 2));
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("from peer 7 does not match the parameters' hash that 2 of the 2 other peers published for "
                       "that epoch (0x0000000000000bad, not 0x0000000000000aaa): a poisoned or damaged state"),
            std::string::npos)
      << j.why;
  // A single honest peer outvotes a donor alone.
  EXPECT_EQ(judge(check(kPoisoned, {{kHonest, 1}}, 1, 1)).verdict, Verdict::refuse);
  // One accomplice is outvoted by two honest peers, and a hash nobody else
  // published is refused even among a split.
  EXPECT_EQ(judge(check(kPoisoned, {{kHonest, 2}, {kPoisoned, 1}}, 3, 3)).verdict, Verdict::refuse);
  EXPECT_EQ(judge(check(kPoisoned, {{kHonest, 1}, {0xCCC, 1}}, 2, 2)).verdict, Verdict::refuse);
}

TEST(StateCheck, AClaimBeyondEveryOtherPeerIsRefusedAtOnce) {
  const Judgement j = judge(check(kPoisoned, {}, 2, 0, /*epoch=*/1000, /*others_top=*/21));
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("claims an epoch ahead of every other peer (the furthest is at 21)"), std::string::npos) << j.why;
  // Within one state-averaging period ahead: waited for.
  EXPECT_EQ(judge(check(kPoisoned, {}, 2, 0, 30, 21)).verdict, Verdict::wait);
}

// A fast run passes epochs faster than records renew: a claim ahead of
// records older than the state is waited for, and the hashes the others
// then publish for its epoch decide.
TEST(StateCheck, AClaimAheadOfOlderRecordsWaitsForNewerOnes) {
  StateCheck c = check(kHonest, {}, 2, 0, /*epoch=*/60, /*others_top=*/42);
  c.others_fresh = false;
  EXPECT_EQ(judge(c).verdict, Verdict::wait);
  c.others_fresh = true;  // the same records, renewed
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
  c.others_fresh = false;
  c.votes.votes = {{kHonest, 2}};
  c.votes.others_reached = 2;
  EXPECT_EQ(judge(c).verdict, Verdict::keep);
  // A poisoned state of that epoch is refused by the same votes.
  c.digest = kPoisoned;
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
  // Newer records still behind it: refused; so is a claim when time is out.
  c = check(kHonest, {}, 2, 0, 60, 42);
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
  c.others_fresh = false;
  c.out_of_time = true;
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
  // Bounded groups: a member of the donor's group vouches before the records renew.
  c = check(kHonest, {{kHonest, 1}}, 2, 1, 60, 42);
  c.others_fresh = false;
  c.bounded = true;
  EXPECT_EQ(judge(c).verdict, Verdict::keep);
  c.votes.votes.clear();
  EXPECT_EQ(judge(c).verdict, Verdict::wait);
}

TEST(StateCheck, UntilTheOthersPublishTheJoinerWaitsThenDecidesOnWhatCame) {
  StateCheck c = check(kHonest, {}, 2, 0);
  EXPECT_EQ(judge(c).verdict, Verdict::wait);
  c.out_of_time = true;
  Judgement j = judge(c);
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("none of the 2 other peers that publish parameters' hashes published one for that epoch"),
            std::string::npos)
      << j.why;
  // One of two came in time: the most published decides.
  c = check(kHonest, {{kHonest, 1}}, 3, 1);
  EXPECT_EQ(judge(c).verdict, Verdict::wait);
  c.out_of_time = true;
  EXPECT_EQ(judge(c).verdict, Verdict::keep);
}

TEST(StateCheck, WithNobodyToVouchOrAnEvenSplitTheStateIsTakenOnTrust) {
  Judgement alone = judge(check(kHonest, {}, 0, 0, 20, -1));
  EXPECT_EQ(alone.verdict, Verdict::trust);
  EXPECT_NE(alone.why.find("no other healthy peer publishes parameters' hashes"), std::string::npos) << alone.why;
  Judgement split = judge(check(kHonest, {{kHonest, 1}, {0xCCC, 1}}, 2, 2));
  EXPECT_EQ(split.verdict, Verdict::trust);
  EXPECT_NE(split.why.find("split"), std::string::npos) << split.why;
}

TEST(StateCheck, WithBoundedGroupsAMemberOfTheDonorsGroupVouches) {
  // Three groups of two averaged apart: the donor's group-mate published its
  // hash, the four others two other hashes, and no hash has a majority.
  StateCheck c = check(kHonest, {{kHonest, 1}, {0xCCC, 2}, {0xDDD, 2}}, 5, 5);
  c.bounded = true;
  Judgement j = judge(c);
  EXPECT_EQ(j.verdict, Verdict::keep) << j.why;
  EXPECT_NE(j.why.find("the donor's group"), std::string::npos) << j.why;
  // A group of four and the donor's of two: without bounded groups the
  // four outvote the donor's group-mate.
  c = check(kHonest, {{kHonest, 1}, {0xCCC, 4}}, 5, 5);
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
  c.bounded = true;
  EXPECT_EQ(judge(c).verdict, Verdict::keep);
  // A hash no other peer published is waited on, then refused.
  c = check(kPoisoned, {{kHonest, 1}}, 5, 1);
  c.bounded = true;
  EXPECT_EQ(judge(c).verdict, Verdict::wait);
  c.out_of_time = true;
  j = judge(c);
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("no member of the donor's group vouches for it"), std::string::npos) << j.why;
  c = check(kHonest, {}, 0, 0, 20, -1);
  c.bounded = true;
  EXPECT_EQ(judge(c).verdict, Verdict::trust);
}

TEST(StateCheck, WithBoundedGroupsAMateWhoseRecordIsNoLongerLiveStillVouches) {
  // The donor's group-mates published its hash in records older than the
  // live horizon; the live peers are in other groups.
  StateCheck c = check(kHonest, {{0xCCC, 2}}, 2, 2);
  c.votes.vouchers = {{kHonest, 2}, {0xCCC, 2}};
  c.bounded = true;
  Judgement j = judge(c);
  EXPECT_EQ(j.verdict, Verdict::keep) << j.why;
  EXPECT_NE(j.why.find("older than the live horizon"), std::string::npos) << j.why;
  // A hash nobody published, live or not, is still refused in the end.
  c.digest = kPoisoned;
  c.out_of_time = true;
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
  // Without bounded groups the live majority decides, as before.
  c = check(kHonest, {{0xCCC, 2}}, 2, 2);
  c.votes.vouchers = {{kHonest, 5}};
  EXPECT_EQ(judge(c).verdict, Verdict::refuse);
}

}  // namespace
}  // namespace loom_collab
