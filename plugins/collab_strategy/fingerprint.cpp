// SPDX-License-Identifier: Apache-2.0
#include "fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "records.h"

namespace loom_collab {
namespace {

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// "parameter 'fc1.weight': Float [64]" -> ("parameter 'fc1.weight'", "Float [64]").
std::pair<std::string, std::string> split_item(const std::string &line) {
  const size_t colon = line.find(": ");
  if (colon == std::string::npos) return {line, ""};
  return {line.substr(0, colon), line.substr(colon + 2)};
}

std::string dtype_text(const DLDataType &t) {
  const char *code = t.code == kDLFloat ? "float" : t.code == kDLBfloat ? "bfloat" : t.code == kDLInt ? "int" : "other";
  return std::string(code) + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

}  // namespace

std::string fingerprint_text(const loom_training_state_v1 &state, const Options &o, bool direct) {
  std::string out;
  if (state.struct_size >= LOOM_TRAINING_STATE_V1_5_SIZE && state.description != nullptr) {
    out = state.description;
    if (!out.empty() && out.back() != '\n') out += '\n';
  } else {
    // An older host names nothing: positions, dtypes and shapes still tell
    // most mismatches apart.
    for (uint32_t i = 0; i < state.num_params; ++i) {
      const DLTensor &t = state.params[i];
      out += "parameter #" + std::to_string(i) + ": " + dtype_text(t.dtype) + " [";
      for (int32_t d = 0; d < t.ndim; ++d) out += (d ? ", " : "") + std::to_string(t.shape[d]);
      out += "]\n";
    }
  }
  // What members exchange, call for call: these must agree or a round would
  // pair different collectives.
  out += "collab round protocol: " + std::to_string(kRoundProtocol) + "\n";
  out += "collab collective: " + o.collective + "\n";
  out += std::string("collab gradients: ") + (direct ? "scaled into one flat vector" : "averaged through a copy") + "\n";
  out += "collab average_state_every: " + std::to_string(o.average_state_every) + "\n";
  // Listed only when set, like aggregation: every member must split a
  // matchmaking's peers alike.
  if (o.target_group_size > 0) out += "collab target_group_size: " + std::to_string(o.target_group_size) + "\n";
  if (o.centered_clip) {
    // Listed only when set, so that "mean" swarms keep their fingerprints.
    char radius[32];
    std::snprintf(radius, sizeof radius, "%.6g", o.clip_radius);
    out += std::string("collab aggregation: centered_clip, clip_radius ") + radius + ", clip_iterations " +
           std::to_string(o.clip_iterations) + "\n";
  }
  // Listed only when set, like aggregation: members must send the same codec.
  if (o.compression != Codec::none) out += std::string("collab compression: ") + codec_name(o.compression) + "\n";
  if (o.state_compression != Codec::none)
    out += std::string("collab state_compression: ") + codec_name(o.state_compression) + "\n";
  // Local updates change what a round averages (pseudo-gradients) and what
  // a snapshot holds (the outer state): peers must agree on all of it.
  if (o.delay_averaging) out += "collab delay_averaging: true\n";
  if (o.balance_bandwidth) out += "collab balance_bandwidth: true\n";
  if (o.top_up != Options::TopUp::grants)  // listed when not the default, like aggregation
    out += std::string("collab top_up: ") + (o.top_up == Options::TopUp::boxes ? "boxes" : "shares") + "\n";
  if (o.local_updates) {
    char line[160];
    std::snprintf(line, sizeof line, "collab local_updates: local_steps %lld, outer_lr %.9g, outer_momentum %.9g\n",
                  static_cast<long long>(o.local_steps), o.outer_lr, o.outer_momentum);
    out += line;
  }
  out += std::string("collab average_optimizer_state: ") + (o.average_optimizer_state ? "true" : "false") + "\n";
  out += "collab target_batch_size: " + std::to_string(o.target_batch_size) + "\n";
  return out;
}

uint64_t fingerprint_of(const std::string &text) { return run_hash(text); }

std::string first_difference(const std::string &mine, const std::string &theirs, size_t their_peers,
                             bool theirs_truncated) {
  const auto a = lines_of(mine), b = lines_of(theirs);
  const std::string swarm = "in the swarm (" + std::to_string(their_peers) + (their_peers == 1 ? " peer)" : " peers)");
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size() && i < b.size()) {
      if (a[i] == b[i]) continue;
      auto [ka, va] = split_item(a[i]);
      auto [kb, vb] = split_item(b[i]);
      if (ka == kb) return ka + ": " + va + " here, " + vb + " " + swarm;
      return "'" + a[i] + "' here, '" + b[i] + "' " + swarm;
    }
    if (i >= b.size() && theirs_truncated)
      return "the swarm's description was cut to fit a record; they agree up to '" + (b.empty() ? "" : b.back()) + "'";
    if (i < a.size()) return a[i] + " here, absent " + swarm;
    return "absent here, " + b[i] + " " + swarm;
  }
  return "the descriptions agree but their hashes differ (a peer of another Loom version?)";
}

SwarmModel swarm_model(const std::vector<ModelVote> &votes) {
  struct Side {
    size_t peers = 0;
    int64_t oldest = INT64_MAX;
  };
  std::map<uint64_t, Side> sides;
  for (const auto &v : votes) {
    Side &s = sides[v.fingerprint];
    ++s.peers;
    s.oldest = std::min(s.oldest, v.since_ms);
  }
  SwarmModel best;
  int64_t best_oldest = INT64_MAX;
  for (const auto &[fp, s] : sides) {
    if (s.peers > best.peers || (s.peers == best.peers && s.oldest < best_oldest)) {
      best = {fp, s.peers};
      best_oldest = s.oldest;
    }
  }
  return best;
}

}  // namespace loom_collab
