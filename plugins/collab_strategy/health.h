/* SPDX-License-Identifier: Apache-2.0 */
// Which members of a round count, decided alike on every member from what
// they exchanged before any data moved: each member's weight (its samples;
// 0 from a peer whose gradients are not finite or that has not healed since
// it saw a non-finite loss) and the norm of what it brings. A member whose
// norm is not finite, or more than kOutlierFactor times the group's median,
// counts 0: a peer that diverged brings finite but huge numbers for a step
// or two before they overflow, and one such member would ruin everyone's
// parameters. Pure functions, tested on their own.
#ifndef LOOM_COLLAB_HEALTH_H
#define LOOM_COLLAB_HEALTH_H

#include <cstdint>
#include <string>
#include <vector>

namespace loom_collab {

// Far above what honest members differ by (gradients of one sample against
// the mean of thousands differ by ~sqrt(batch)), far below a diverged peer.
constexpr double kOutlierFactor = 1000;
// For parameters, what is compared is each member's drift: the norm of how
// far its parameters moved since it last synced with the swarm (averaged or
// loaded). Honest members step at one learning rate and drift alike; a peer
// at lr = 1000 steps far more per step (at epoch 290 its lr was 3.4 against
// the others' 1e-5). Comparing parameters' norms let such a peer through
// one step after it healed, and the honest peers ended at 0.09 accuracy
// (measured once in about six runs; its norm was not logged).
constexpr double kParameterOutlierFactor = 10;

struct MemberWeights {
  std::vector<double> weight;  // per member (rank), after exclusions
  double total = 0;            // their sum
  std::vector<size_t> outliers;  // ranks excluded for their norm
  std::vector<double> rate;      // per member: its link's measured rate, bytes a second (0: not yet)
  std::vector<double> training;  // per member: its training rate, samples a second (0: not yet)
  // The members' views of how many full peers train in the swarm (not
  // loading, diverged or in client mode), taken at swarm_count; 0: none known.
  double swarm_peers = 0;
  // When the last member came to the meeting (the largest of the members'
  // wall clocks at their entry, ms since the Unix epoch): a time box counts
  // from it, so members that left the meeting late end it with the others.
  double met_ms = 0;
  // The members' own samples a second this epoch, summed (0: none known).
  double speed = 0;
};

// The lower median of values (the smaller middle one of an even count);
// 0 when there are none. Callers pick which values count.
double lower_median(std::vector<double> values);

// The members' count of the swarm's full peers: the lower median of the
// counts they sent (0: a member that knows none). The smallest, as it was,
// let one member whose view was young or collapsed set it: at 64 peers
// groups capped with counts of 1 and 19, so the cap never held, and groups
// of 2 and 3 set out to top up 458,048 and 387,136 samples while the swarm
// ran on (64-peer churn run 18). 0 when no member sent a count.
double swarm_count(const std::vector<double> &counts);

// weights[i], norms[i]: what member i announced (norm < 0 or not finite: its
// data is not finite). Members announcing weight 0 are not part of the
// median.
MemberWeights member_weights(const std::vector<double> &weights, const std::vector<double> &norms,
                             double factor = kOutlierFactor);

// Sum of squares in double: not finite when any value is not (inf, nan), and
// no float overflow for finite values up to FLT_MAX.
double sum_of_squares(const float *data, uint64_t n);

// Samples each member accumulates before the group meets again, when the
// round's weights fell short of target: the deficit in whole batches, shared
// in proportion to the members' training rates (samples a second), so that
// all of them finish it at once; a member that counts but has no rate yet
// (a peer in its first window) is taken at the median of the others' rates,
// and with no rate at all the shares follow the weights (largest remainders
// get the batches left over);
// together they add at most one batch more than the deficit. 0 for a member
// that counts 0. Every member computes the same from the same weights and
// rates; batch is the members' batch (one that trains on another finds the
// next meeting short again, and tops up once more).
// (Shares by weight alone made the barrier: a group formed ahead meets at a
// few percent of its target, where what each member brought is noise, and
// a member that brought one batch of forty drew 1/40 of the rest and then
// waited most of the epoch for the others: 40-52% of an epoch at 8 and 16
// peers, bench/swarm_scale.py. Falling back to weights for all when one
// member had no rate did the same at 64: a follower that had just joined
// brought one batch, drew one, and waited out averaging_timeout in the
// allreduce while another member drew 260,000 samples.)
std::vector<uint64_t> top_up_shares(uint64_t target, const std::vector<double> &weights, uint64_t batch,
                                    const std::vector<double> &rates = {});

// The target of a round whose group is a small part of the swarm: a whole
// group of 2 in a 64-peer swarm under churn (the others in other rounds,
// loading, or gone) met with 1.6% of the target and set out to top up the
// rest (about 1,000 s at an assumed 500 samples a second per peer, not
// measured) while the swarm ran 20 epochs on. When
// four times the group's share of the swarm by count (members / swarm_peers
// of target_batch_size) is under part (the round's part of the target) and
// the top-up from total would take the group over min_seconds at
// group_rate, the target is twice that share, in whole batches; otherwise
// part. By count, not by rate: a member's first windows after a long load
// show a rate near 0, and a cap by rates capped two parts of 381,301
// samples at 64 (64-peer churn run 7). The margins keep sound rounds whole
// (6-peer digits parts of 86 samples were capped at 64 with a margin of 2
// alone). group_rate 0 (a member without a rate): part. Every member
// computes the same from the same exchanged values.
uint64_t swarm_capped_target(uint64_t part, uint64_t target_batch_size, double members, double swarm_peers,
                             double group_rate, uint64_t batch, double total, double min_seconds);

// The members' training rates summed, a member without one (0) counted at
// the median of the others'; 0 when none has a rate. Run 9 of the 64-peer
// churn bench capped no round while groups of 3 of 64 set out to top up
// 606,784 samples: requiring every member's own rate left early groups
// out (likely; not confirmed in the logs).
double group_training_rate(const std::vector<double> &rates);
// Member i's part of that sum, (0, 1]; 1/n when no member has a rate.
double training_rate_share(const std::vector<double> &rates, size_t i);

// How long the slowest member of a short round takes to train its share
// (top_up_shares) at its rate, a member with no rate at the median of the
// others'; 0 when no member has a rate. The members that finish first wait
// that long, plus averaging_timeout, for the group to meet again.
double top_up_seconds(const std::vector<uint64_t> &shares, const std::vector<double> &rates);

// A long top-up goes by time boxes: every member that counts trains for the
// same time and the group meets again, so a member whose machine ran slower
// or faster than its rate said brings less or more instead of keeping the
// others waiting. Shares by rate missed by up to 5x on a loaded machine (8
// peers on 2 cores: a member drew 134,016 samples and took 1.4 s, another
// 71,168 and was done in 0.25 s, then waited), and the members done first
// waited 30% of an epoch. Shares by the speeds measured in a box just run
// did no better: over a fraction of a second a process that ran fast runs
// slow next (the kernel evens out CPU time).
//
// The group's speed (samples a second, the same number at every member):
// what the last box brought over its length, where one ran; else the
// larger of the members' rates summed and their own samples a second this
// epoch summed. Returns the box in seconds, or 0 for a top-up by shares: no
// speed, or a deficit under kTopUpBoxMinSeconds at that speed. The box is a
// fraction of the deficit's time, so that the group falls short, never over,
// and the last part goes by shares: kTopUpBoxFraction at a speed a box
// measured (without churn a box ran up to 19% faster than the one before
// it; under churn 2.3 times, which no fraction covers: options.cpp), and
// kTopUpFirstBoxFraction before any box (on 2 cores shared by 8 peers a
// first box trained 1.3 to 1.7 times the speed the members had trained at
// since their epoch began: the group's forming ran beside it then).
constexpr double kTopUpBoxMinSeconds = 0.1;
constexpr double kTopUpBoxFraction = 0.7;
constexpr double kTopUpFirstBoxFraction = 0.4;
double top_up_group_speed(const std::vector<double> &weights, const std::vector<double> &box_from, double box_seconds,
                          double group_rate, double speed);
double top_up_box_seconds(double deficit, double speed, bool measured);

}  // namespace loom_collab

#endif
