/* SPDX-License-Identifier: Apache-2.0 */
// Bandwidth-aware parts of a group's average (balance_bandwidth).
//
// In the butterfly (a reduce-scatter and an allgather by point-to-point
// blocks), member i, owning a fraction f_i of the vector V, sends and
// receives V (1 + (n - 2) f_i) in all: the copies of the others' parts
// (1 - f_i) V, then its averaged part to each of the n - 1 others. With
// equal parts every member moves the same, so the round runs at the pace of
// the slowest link. Given each member's rate c_i, parts
//     f_i = max(0, (T c_i - 1) / (n - 2)),  sum f_i = 1
// make every member that owns a part finish at the same time T (per byte of
// V): hivemind's load balancing, solved here in closed form by bisection on
// T instead of its linear program. A member whose link is too slow to own
// anything (T c_i < 1) still sends and receives its own V once: nothing
// below 1 / c_i is possible for it, whatever the partition.
//
// The rates come from earlier rounds: each block's time from posting to
// completion. A direction's rate in a phase is the sum of its blocks'
// bytes / seconds (the blocks move at once, sharing the link), over the
// blocks of at least kMinProbeBytes (smaller ones measure latency and the
// link's burst, not its rate). A block can only be slowed by its far end,
// never sped up, so a link's rate is the highest it showed over its last
// kRateWindow rounds (a windowed maximum, as BBR reads delivery rate):
// otherwise a member whose blocks all went to one busy owner would look as
// slow as that owner's link, shed its part, and make the skew worse.
#ifndef LOOM_COLLAB_BANDWIDTH_H
#define LOOM_COLLAB_BANDWIDTH_H

#include <cstdint>
#include <vector>

namespace loom_collab {

constexpr uint64_t kMinProbeBytes = 256 * 1024;

// One phase's blocks in one direction: bytes and seconds from posting to
// completion. The rate they showed in bytes a second, or 0 when no block was
// large enough to tell.
struct TimedBlock {
  uint64_t bytes;
  double seconds;
};
double phase_rate(const std::vector<TimedBlock> &blocks);

constexpr int kRateWindow = 8;

// A member's own link: the highest rate each direction showed over its last
// kRateWindow rounds; the link's rate is the slower direction's.
class LinkRate {
 public:
  // One round's rates out and in (0: that direction did not tell).
  void observe(double out, double in);
  double value() const;  // bytes a second; 0: not measured yet

 private:
  std::vector<double> out_, in_;  // the last kRateWindow rounds', newest last
};

// Each member's fraction of the vector for the given rates (bytes a second,
// by rank). Equal parts when any rate is unknown (<= 0) or not finite, or
// when there are fewer than 3 members (with 2, each moves V whatever the
// split).
std::vector<double> balanced_fractions(const std::vector<double> &rates);

// Seconds per byte of the vector a butterfly with these fractions takes on
// links of these rates: the slowest member's V (1 + (n - 2) f_i) / c_i.
double butterfly_time(const std::vector<double> &fractions, const std::vector<double> &rates);

// Whether a round goes by parts (balanced_round.cpp) rather than through the
// collective's ring allreduce. On links alike the ring is faster (measured
// over 100 Mbit/s: 1.06 s against 1.42 s for 7.6 MB), so parts go only
// where they are predicted to take under kPartsPayBelow of equal parts'
// time, and wherever a member's rate is not known yet or every
// kReprobeEvery epochs, so that the rates are measured and stay current.
// Every member decides alike: the same rates and epoch.
constexpr double kPartsPayBelow = 0.75;
constexpr int64_t kReprobeEvery = 10;
bool parts_pay(const std::vector<double> &rates, int64_t epoch);

// Where each member's part of numel values begins (n + 1 offsets, the last
// numel): cumulative, so the parts cover every value once.
std::vector<uint64_t> part_offsets(const std::vector<double> &fractions, uint64_t numel);

}  // namespace loom_collab

#endif
