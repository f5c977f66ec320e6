/* SPDX-License-Identifier: Apache-2.0 */
// The options libcollab_strategy.so declares (`loom plugins info collab`
// lists them) and their parsed, validated values.
#ifndef LOOM_COLLAB_OPTIONS_H
#define LOOM_COLLAB_OPTIONS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compression.h"
#include "loom/plugin.h"
#include "state_transfer.h"
#include "../common/swarm_key.h"

namespace loom_collab {

enum OptionIndex {
  kOptTargetBatchSize,
  kOptRunId,
  kOptBatchSize,
  kOptInitialPeers,
  kOptListen,
  kOptPort,
  kOptAnnounce,
  kOptMatchmakingTime,
  kOptAveragingTimeout,
  kOptMinGroupSize,
  kOptTargetGroupSize,
  kOptAverageStateEvery,
  kOptAverageOptimizerState,
  kOptLoadStateTimeout,
  kOptLoadDonorsAtOnce,
  kOptBootstrapTimeout,
  kOptMinPeers,
  kOptCollective,
  kOptScaledAllreduce,
  kOptVerbose,
  kOptReportQuietAfter,
  kOptServeMaxTransfers,
  kOptServeMaxPerAddress,
  kOptServeRequestsPerMinute,
  kOptServeIdleTimeout,
  kOptSwarmKey,
  kOptAggregation,
  kOptClipRadius,
  kOptClipIterations,
  kOptRole,
  kOptCheckpointDir,
  kOptCheckpointEvery,
  kOptProgressReads,
  kOptClientMode,
  kOptRelayClients,
  kOptProgressShardPeers,
  kOptProgressSource,
  kOptSnapshotAhead,
  kOptCompression,
  kOptStateCompression,
  kOptLocalUpdates,
  kOptLocalSteps,
  kOptOuterLr,
  kOptOuterMomentum,
  kOptDelayAveraging,
  kOptBalanceBandwidth,
  kOptTopUp,
  kNumOptions
};

extern const loom_option_decl kOptions[kNumOptions];

struct Options {
  uint64_t target_batch_size = 0;
  std::string run_id;
  uint64_t batch_size = 0;  // 0: count what the trainer reports
  std::vector<std::string> initial_peers;
  std::string listen;
  uint16_t port = 0;
  std::string announce;  // empty: this machine's outward address
  double matchmaking_time = 0;  // seconds
  double averaging_timeout = 0;
  int64_t min_group_size = 2;
  // Peers per averaging group (group_split.h); 0: every peer ready at an
  // epoch averages in one group.
  uint32_t target_group_size = 0;
  int64_t average_state_every = 0;
  bool average_optimizer_state = false;
  double load_state_timeout = 0;
  int64_t load_donors_at_once = 3;  // donors a load asks at once (download_state's racing)
  double bootstrap_timeout = 0;
  int64_t min_peers = 1;
  std::string collective;
  bool scaled_allreduce = true;
  bool verbose = false;
  double report_quiet_after = 30;  // seconds at one epoch before a peer says what it does (0: never)
  ServeLimits serve;  // the state server's serve_* limits
  std::string swarm_key_path;                // empty: an open swarm
  std::optional<loom_key::SwarmKey> swarm_key;  // read from swarm_key_path
  bool centered_clip = false;   // aggregation = "centered_clip" (robust.h); false: "mean"
  double clip_radius = 0.5;     // CenteredClip's radius, in medians of the members' distances
  int64_t clip_iterations = 5;  // CenteredClip's iterations
  // The codecs gradients (compression) and state averaging's parameters and
  // optimizer statistics (state_compression) travel in (compression.h);
  // anything but none averages slice by slice (sliced_round.cpp).
  Codec compression = Codec::none;
  Codec state_compression = Codec::none;
  // role = "checkpointer": a peer that never trains; it loads the swarm's
  // state every checkpoint_every epochs, keeps it in checkpoint_dir and
  // serves it to joiners (peer_checkpointer.cpp).
  // progress_reads = "eta" (the default): reads and puts of progress
  // records by the time to the target (tracker.h); false ("every_step"):
  // on every step.
  bool progress_reads_eta = true;
  // Records per progress shard (progress_shards.h): a swarm of more than
  // about twice this many peers reads its progress sampled.
  int64_t progress_shard_peers = 32;
  // progress_source: where reads of the others' progress go between DHT
  // reads (peer_progress.cpp). peers: to another full peer's state server;
  // dht: every read is a DHT read; automatic ("auto", the default): peers
  // once the swarm has kPullMinPeers (8), the DHT below.
  enum class ProgressSource { automatic, peers, dht };
  ProgressSource progress_source = ProgressSource::automatic;
  // snapshot_ahead: when a full peer snapshots its state for joiners
  // besides on request (peer.cpp's serve_at_epoch_start).
  enum class SnapshotAhead { never, automatic, always };
  SnapshotAhead snapshot_ahead = SnapshotAhead::automatic;
  bool checkpointer = false;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // resolved: average_state_every, or 10 without state averaging
  // client_mode: this peer accepts no connection (behind NAT or a
  // firewall): it never serves state nor joins a group's communicator, and
  // its contributions go through a full peer, its relay (relay.h).
  bool client_mode = false;
  int64_t relay_clients = 8;
  // local_updates (DiLoCo, outer_step.h): the host's optimizer steps at
  // every window on this peer's own gradients; once an epoch the swarm
  // averages the pseudo-gradients and an outer Nesterov step (outer_lr,
  // outer_momentum) moves the shared anchor. local_steps > 0: an epoch is
  // that many local steps on each peer; 0: the swarm's target_batch_size.
  bool local_updates = false;
  int64_t local_steps = 0;
  double outer_lr = 0.7;        // DiLoCo's
  double outer_momentum = 0.9;  // DiLoCo's
  // delay_averaging (delayed_round.cpp): a round's data moves on a helper
  // thread while the next epoch accumulates; its result is applied one
  // step late (hivemind's delayed parameter updates).
  bool delay_averaging = false;  // client-mode peers this (full) peer relays for at once; 0: none
  // balance_bandwidth (balanced_round.cpp, bandwidth.h): a round's mean by
  // point-to-point blocks, each member owning a part sized by its link's
  // rate as measured in earlier rounds.
  bool balance_bandwidth = false;
  // How a round that met short of the target tops up the rest: shares by
  // training rate (health.h's top_up_shares), time boxes first
  // (top_up_box_seconds: faster on a loaded machine, not bound to the
  // target), or grants from the group's hub (top_up_grants.h).
  enum class TopUp { shares, boxes, grants };
  TopUp top_up = TopUp::grants;
};

// Reads and validates every option through host->get_option. On a bad value
// returns false with *why naming the option, the value and what is valid.
bool read_options(const loom_host_v1 *host, Options *out, std::string *why);

// A run_id: 1 to 64 of [A-Za-z0-9_.-].
bool valid_run_id(const std::string &id);
// "a, b,c" -> {"a", "b", "c"}: comma-separated, blanks trimmed, empties dropped.
std::vector<std::string> split_list(const std::string &text);

// Checks "host:port" (IPv4 literal or a name, port 1..65535); on failure
// *why says what is wrong.
bool valid_peer_address(const std::string &text, std::string *why);

}  // namespace loom_collab

#endif
