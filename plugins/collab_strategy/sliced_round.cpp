// SPDX-License-Identifier: Apache-2.0
// A group's average slice by slice (compression.h's butterfly): member r
// owns slice r of the vector, receives every member's copy of it (alltoall),
// combines them, and every member gathers the combined slices (allgather).
// The data moved is that of a reduce-scatter and an allgather, the same as
// a ring allreduce's, in the codec's bytes. Combining is CenteredClip
// (aggregation = centered_clip, robust.h, as BTARD does) or the weighted
// mean accumulated in f32 (a compressed mean: compression or
// state_compression set).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compression.h"
#include "peer.h"
#include "robust.h"

namespace loom_collab {

void Peer::combine_copies(const std::vector<const float *> &copies, const std::vector<double> &weights,
                          uint64_t len, float *out, const char *what) {
  if (!opt_.centered_clip) {
    weighted_mean(copies, weights, len, out);
    return;
  }
  const ClipStats stats =
      centered_clip(copies, capped_weights(weights), len, opt_.clip_radius, int(opt_.clip_iterations), out);
  if (stats.clipped > 0)
    detail("centered_clip: " + std::to_string(stats.clipped) + " of " + std::to_string(copies.size()) +
           " members' copies of this peer's " + what + " were clipped");
}

bool Peer::sliced_average(GroupComm &comm, const float *values, uint64_t numel, const std::vector<double> &weights,
                          float *out, Codec codec, Clock::time_point deadline, std::string *why) {
  const SliceLayout l(codec, numel, uint64_t(comm.size()));
  const uint64_t r = uint64_t(comm.rank());
  slice_send_.resize(l.members * l.slice_bytes);
  slice_recv_.resize(l.members * l.slice_bytes);
  const uint64_t clamped = encode_slices(codec, l, values, slice_send_.data());
  if (clamped > 0)
    log_limited(Level::warn, "codec range",
                std::to_string(clamped) + " of this peer's values lay beyond " + codec_name(codec) +
                    "'s range (+-65504) and were clamped to it; use bf16 (binary32's range) for such values");
  if (comm.alltoall(slice_send_.data(), slice_recv_.data(), l.slice_bytes, deadline, why) != LOOM_OK) return false;
  slice_copies_.resize(l.members * l.chunk);
  decode_copies(codec, l, slice_recv_.data(), slice_copies_.data());
  const uint64_t begin = std::min(numel, r * l.chunk);
  const uint64_t len = std::min(numel, begin + l.chunk) - begin;
  std::vector<const float *> copies(l.members);
  for (uint64_t j = 0; j < l.members; ++j) copies[j] = slice_copies_.data() + j * l.chunk;
  slice_mean_.assign(l.chunk, 0.0f);  // the padding stays zero
  combine_copies(copies, weights, len, slice_mean_.data(), "slice");
  // The owner's result travels encoded too, to itself as well: every member
  // decodes the same bytes, so all hold the same values.
  encode(codec, slice_mean_.data(), l.chunk, slice_send_.data());
  if (comm.allgather(slice_send_.data(), slice_recv_.data(), l.slice_bytes, deadline, why) != LOOM_OK) return false;
  decode_gathered(codec, l, slice_recv_.data(), out);
  return true;
}

}  // namespace loom_collab
