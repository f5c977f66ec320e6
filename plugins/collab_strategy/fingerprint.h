/* SPDX-License-Identifier: Apache-2.0 */
// One model per swarm: a peer's fingerprint is a hash of what it trains (the
// host's description: parameters, buffers, the optimizer's state layout)
// and of the collab options every member must share. Peers publish it; those
// whose fingerprint differs from the swarm's are never counted or grouped,
// and a peer that finds itself the odd one out stops with the first line
// that differs. Pure functions, tested on their own.
#ifndef LOOM_COLLAB_FINGERPRINT_H
#define LOOM_COLLAB_FINGERPRINT_H

#include <cstdint>
#include <string>
#include <vector>

#include "loom/strategy.h"
#include "options.h"

namespace loom_collab {

// The text a fingerprint hashes: the host's description (ABI 1.5) or, from
// an older host, each parameter's dtype and shape by position; then the
// options that change what members exchange. direct: gradients are averaged
// by allreduce_scaled straight into one flat vector (a different sequence of
// collective calls from the copying path).
std::string fingerprint_text(const loom_training_state_v1 &state, const Options &options, bool direct);

// The version of what members send each other in a round and how they
// meet (the weight exchange's layout, the block framing of parts, how
// groups split), listed in the fingerprint so that peers of builds that
// would misread each other's rounds refuse to group and name it
// ("collab round protocol: 3 here, absent in the swarm").
// 2: the weight exchange carries each member's link rates (3n slots).
// 3: bounded groups split epochs in pairs, rows then columns (group_split.h).
// 4: beyond target^2 peers, in cycles of d epochs over a d-dimensional grid.
// 5: under local updates the members compare and average the model's
//    buffers after each averaged round, and a relay may answer resync.
constexpr int kRoundProtocol = 5;

uint64_t fingerprint_of(const std::string &text);

// The first line where mine and theirs differ, as
//   "parameter 'fc1.weight': Float [64, 64] here, Float [128, 64] in the swarm (3 peers)"
// ("... here, absent in the swarm", "absent here, ... in the swarm" when one
// side has fewer lines). theirs_truncated: their text was cut to fit a record,
// so a difference past its end cannot be named.
std::string first_difference(const std::string &mine, const std::string &theirs, size_t their_peers,
                             bool theirs_truncated = false);

// A live peer's model, for deciding which model is the swarm's.
struct ModelVote {
  uint64_t fingerprint = 0;
  int64_t since_ms = 0;  // when that peer started
};
struct SwarmModel {
  uint64_t fingerprint = 0;
  size_t peers = 0;  // live peers that train it
};
// The swarm's model: the fingerprint most live peers share; a tie goes to
// the side with the peer that started first (the swarm others joined).
// votes is not empty.
SwarmModel swarm_model(const std::vector<ModelVote> &votes);

}  // namespace loom_collab

#endif
