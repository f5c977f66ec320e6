// SPDX-License-Identifier: Apache-2.0
// aggregation = centered_clip: a group's CenteredClip, slice by slice (as
// BTARD does): member r owns slice r of the vector, receives every member's
// copy of it (alltoall), runs CenteredClip on it, and every member gathers
// the slices (allgather). The data moved is that of a reduce-scatter and an
// allgather: the same as a ring allreduce's.
#include <algorithm>
#include <cstring>

#include "peer.h"
#include "robust.h"

namespace loom_collab {

bool Peer::robust_average(GroupComm &comm, const float *values, uint64_t numel, const std::vector<double> &weights,
                          float *out, Clock::time_point deadline, std::string *why) {
  const uint64_t n = uint64_t(comm.size()), r = uint64_t(comm.rank());
  const uint64_t chunk = (numel + n - 1) / n;  // the last slices are padded with zeros
  robust_send_.assign(chunk * n, 0.0f);
  std::memcpy(robust_send_.data(), values, numel * sizeof(float));
  robust_recv_.resize(chunk * n);
  if (comm.alltoall(robust_send_.data(), robust_recv_.data(), chunk, deadline, why) != LOOM_OK) return false;
  const uint64_t begin = std::min(numel, r * chunk);
  const uint64_t len = std::min(numel, begin + chunk) - begin;
  std::vector<const float *> copies(n);
  for (uint64_t j = 0; j < n; ++j) copies[j] = robust_recv_.data() + j * chunk;
  robust_slice_.assign(chunk, 0.0f);
  const ClipStats stats = centered_clip(copies, capped_weights(weights), len, opt_.clip_radius,
                                        int(opt_.clip_iterations), robust_slice_.data());
  if (stats.clipped > 0)
    detail("centered_clip: " + std::to_string(stats.clipped) + " of " + std::to_string(n) +
           " members' copies of this peer's slice were clipped");
  if (comm.allgather(robust_slice_.data(), robust_recv_.data(), chunk, deadline, why) != LOOM_OK) return false;
  std::memcpy(out, robust_recv_.data(), numel * sizeof(float));
  return true;
}

}  // namespace loom_collab
