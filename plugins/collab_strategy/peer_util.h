/* SPDX-License-Identifier: Apache-2.0 */
// Helpers the peer's files share: clocks and number formats for log lines,
// flat copies of the host's tensors, and the one digest-agreement
// allreduce. Included by peer.h.
#ifndef LOOM_COLLAB_PEER_UTIL_H
#define LOOM_COLLAB_PEER_UTIL_H

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "group_comm.h"
#include "loom/strategy.h"
#include "records.h"

namespace loom_collab {

// A peer seen in the records, to introduce to the DHT: where its state
// server listens, and when it was last seen.
struct SeenAddress {
  std::string host;
  uint16_t port = 0;
  int64_t seen_ms = 0;
};

// A rate-limited log line (Peer::log_limited): when it was last said, and
// how many like it were held back since.
struct LimitedLine {
  int64_t last_ms = 0;
  uint64_t held = 0;
};

// A float32 CPU tensor of the host's, as the strategy uses it.
struct FloatView {
  float *data = nullptr;
  uint64_t numel = 0;
};

int64_t wall_ms();
// "2", "0.5": a duration as the user wrote it, for messages.
std::string seconds_text(double s);
// "12.3": a measured duration in milliseconds, to 0.1 ms, for the verbose
// round lines (benchmarks read them; a whole millisecond hides a small round).
std::string milliseconds_text(Clock::duration d);
// "0.00123", "4.5e+03": a value in a message, to 3 significant digits.
std::string number_text(double v);

// "3 peers (epoch 4, attempt 0)": a group, for the log lines tests and
// benchmarks read.
std::string group_text(const GroupRecord &g);
// The views' values, one after the other, into out (the views' total
// numel); and back.
uint64_t views_numel(const std::vector<FloatView> &views);
void copy_from_views(const std::vector<FloatView> &views, float *out);
void copy_into_views(const float *in, const std::vector<FloatView> &views);
// Whether every member of comm holds the same digest, by one allreduce of
// 5 doubles every member must make; *flag_max gets the largest flag any
// member passed (what else the group must know in the same call). False,
// with *why, when the collective failed.
bool same_digest(GroupComm &comm, uint64_t digest, double flag, Clock::time_point deadline, bool *same,
                 double *flag_max, std::string *why);
// A view of t when it is a compact float32 CPU tensor.
bool float_view(const DLTensor &t, FloatView *out);
// The start of the one contiguous range the views tile together, in any
// order; null when they leave gaps or overlap.
float *tiled_range(std::vector<FloatView> views);

}  // namespace loom_collab

#endif
