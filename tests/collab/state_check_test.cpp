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
  c.every = 10;
  return c;
}

TEST(StateCheck, TheHashMostPeersPublishedIsKept) {
  const Judgement j = judge(check(kHonest, {{kHonest, 3}}, 2, 2));
  EXPECT_EQ(j.verdict, Verdict::keep);
  EXPECT_NE(j.why.find("matches the parameters' hash that 3 of 3 peers published"), std::string::npos) << j.why;
}

TEST(StateCheck, APoisonedStateIsRefusedEvenWhenItsDonorVotesForTheHonestHash) {
  const Judgement j = judge(check(kPoisoned, {{kHonest, 3}}, 2, 2));
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("from peer 7 does not match the parameters' hash that 3 of 3 peers published for that epoch "
                       "(0x0000000000000bad, not 0x0000000000000aaa): a poisoned or damaged state"),
            std::string::npos)
      << j.why;
  // Its donor voting for its own hash is outvoted.
  EXPECT_EQ(judge(check(kPoisoned, {{kHonest, 2}, {kPoisoned, 1}}, 2, 2)).verdict, Verdict::refuse);
}

TEST(StateCheck, AClaimBeyondEveryOtherPeerIsRefusedAtOnce) {
  const Judgement j = judge(check(kPoisoned, {}, 2, 0, /*epoch=*/1000, /*others_top=*/21));
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("claims an epoch ahead of every other peer (the furthest is at 21)"), std::string::npos) << j.why;
  // Within one state-averaging period ahead: waited for.
  EXPECT_EQ(judge(check(kPoisoned, {{kPoisoned, 1}}, 2, 0, 30, 21)).verdict, Verdict::wait);
}

TEST(StateCheck, UntilTheOthersPublishTheJoinerWaitsThenRefuses) {
  StateCheck c = check(kHonest, {{kHonest, 1}}, 2, 1);
  EXPECT_EQ(judge(c).verdict, Verdict::wait);
  c.out_of_time = true;
  const Judgement j = judge(c);
  EXPECT_EQ(j.verdict, Verdict::refuse);
  EXPECT_NE(j.why.find("did not reach that epoch in time"), std::string::npos) << j.why;
}

TEST(StateCheck, WithNobodyToVouchOrPeersThatDisagreeTheStateIsTakenOnTrust) {
  Judgement alone = judge(check(kHonest, {{kHonest, 1}}, 0, 0, 20, -1));
  EXPECT_EQ(alone.verdict, Verdict::trust);
  EXPECT_NE(alone.why.find("no other healthy peer publishes parameters' hashes"), std::string::npos) << alone.why;
  Judgement split = judge(check(kHonest, {{kHonest, 1}, {0xCCC, 1}}, 1, 1));
  EXPECT_EQ(split.verdict, Verdict::trust);
  EXPECT_NE(split.why.find("the 2 peers that publish parameters' hashes do not agree"), std::string::npos) << split.why;
}

}  // namespace
}  // namespace loom_collab
