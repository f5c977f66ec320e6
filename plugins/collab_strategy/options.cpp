// SPDX-License-Identifier: Apache-2.0
#include "options.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "../common/listen_address.h"

namespace loom_collab {

const loom_option_decl kOptions[kNumOptions] = {
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "target_batch_size", nullptr,
     "Samples the whole swarm accumulates before each collaborative optimizer step (required)."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "run_id", "loom_run",
     "Name of the run: peers with the same run_id train together; it namespaces every DHT key."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "batch_size", "0",
     "Samples this peer counts per optimizer-step window; 0 counts what the trainer reports."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING_LIST, "initial_peers", "",
     "host:port of peers already in the swarm to join through (also LOOM_INITIAL_PEERS); empty starts a new swarm."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "listen", "0.0.0.0",
     "IPv4 address (or a name resolving to one) of this machine that every socket of this peer binds: its DHT node "
     "(UDP), its state server (TCP) and, through the collective's own listen option, the collective's listeners "
     "(UCX's TCP transport). 0.0.0.0 binds every interface; 127.0.0.1 keeps a swarm on this machine."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "port", "0",
     "Port of the DHT node and the state server; 0 picks a free one."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "announce", "",
     "Address other peers reach this one at; empty uses this machine's outward IPv4 address."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "matchmaking_time", "2.0",
     "Seconds a peer ready to average waits for others to join its group."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "averaging_timeout", "30.0",
     "Seconds one averaging round (retries among survivors included) may take before the peer steps alone."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "min_group_size", "2",
     "Fewest peers that form an averaging group; with fewer a peer steps on its local gradients."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "target_group_size", "0",
     "Peers per averaging group (Moshpit SGD): a swarm with more peers ready at an epoch averages in several "
     "groups of about this size, split afresh every epoch so that what one group learns reaches the others; "
     "together they bring target_batch_size. 0: one group of every ready peer. Every peer of a run must use "
     "the same value."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "average_state_every", "5",
     "Average the parameters every this many epochs (and at the last one) so drifted peers converge; 0: only at the end."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "average_optimizer_state", "false",
     "Also average the optimizer's statistics (momentum, Adam's moments) whenever the parameters are averaged."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "load_state_timeout", "60.0",
     "Seconds a joining or lagging peer may spend downloading the state from donors."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "load_donors_at_once", "3",
     "Donors a joining or lagging peer asks for the state at once; the first ready streams it from its start and "
     "the others that hold the same bytes bring chunks from its end, so a slow donor brings few. 1 asks one after "
     "another, best first (idle donors before busy ones), and never spreads a download."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "bootstrap_timeout", "20.0",
     "Seconds to wait for a reply from the initial peers (and for min_peers) before giving up."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "min_peers", "1",
     "Peers (this one included) the swarm must have before this peer starts training, within bootstrap_timeout."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "collective", "ucx",
     "Collective plugin that averages within a group; it must support dynamic groups (lib<name>_collective.so)."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "scaled_allreduce", "true",
     "Average gradients with the collective's allreduce_scaled, written straight into them, when it offers one; "
     "false: sum into a copy, then divide (one more pass; for comparison). Every peer of a run must use the same "
     "value: groups that mix them fail their rounds as mismatched operations."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "verbose", "false",
     "Log matchmaking and averaging details at info level instead of debug."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "report_quiet_after", "30.0",
     "Seconds a peer may stay at one epoch before it logs what it is doing (what its training thread waits for, "
     "the samples it holds, the swarm as it reads it), and again every as many seconds; 0: never."},
    // The state server's limits (ServeLimits in state_transfer.h says how they work together).
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "serve_max_transfers", "16",
     "State transfers this peer serves at once; when all are taken a new request replaces a stalled or slow one "
     "(moving nothing for 1 s, or under 64 KiB/s), else it is answered busy."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "serve_max_per_address", "8",
     "Connections one address may hold open at the state server before sending its whole request; a newer one "
     "closes that address's oldest, so idle connections cannot crowd out a joiner that asks at once."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "serve_requests_per_minute", "60",
     "State requests one address may have served per minute; over it they are answered busy. A request that "
     "ended with little of the state sent (dropped, stalled) counts only for what was sent."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "serve_idle_timeout", "5.0",
     "Seconds a state-server connection may take to send its whole request, or go without reading any of the "
     "reply, before it is dropped (slowloris, stalled readers)."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "swarm_key", "",
     "Path of the swarm key file (`loom swarm keygen FILE`, mode 0600; also LOOM_SWARM_KEY). With a key, the "
     "swarm's DHT records are sealed and kept where only key holders find them. Empty: an open swarm, which "
     "anyone who knows the run_id and reaches a peer can join and read."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "aggregation", "mean",
     "How a group combines its members' gradients and parameters: \"mean\" (weighted by samples; one allreduce) "
     "or \"centered_clip\" (CenteredClip, Karimireddy et al. 2021: each member owns a slice, receives every "
     "member's copy of it, clips their pull, and the slices are gathered), which a minority of members sending "
     "arbitrary values cannot drag away. Every peer of a run must use the same value (part of the fingerprint)."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "clip_radius", "0.5",
     "centered_clip's radius, in units of the median distance of the members' values from their coordinate-wise "
     "median (so it follows the gradients' scale): smaller resists more, larger is closer to the mean."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "clip_iterations", "5",
     "centered_clip's iterations per slice (1 to 100)."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "role", "trainer",
     "\"trainer\", or \"checkpointer\": a peer that never trains; it loads the swarm's state like a joiner every "
     "checkpoint_every epochs, keeps the latest in checkpoint_dir/checkpoint.pt (loom train --resume takes it) "
     "and serves it to joiners, so a run can go on after every trainer has left."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "checkpoint_dir", "",
     "Folder where a checkpointer keeps the swarm's latest state (required with role = \"checkpointer\")."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "checkpoint_every", "0",
     "Epochs between a checkpointer's loads of the swarm's state; 0: average_state_every (10 when that is 0)."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "progress_reads", "eta",
     "How often a peer puts its progress record and reads the others': \"eta\" (sample counts every 50 ms, reads "
     "an eighth of the estimated time to the target apart, 10 ms to 1 s; 20x fewer DHT datagrams than every_step "
     "with 2 peers, 3x with 4, in bench/swarm_scale.py), or \"every_step\" (at each training step)."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "client_mode", "false",
     "For a peer that cannot accept connections (behind NAT, or a firewall that drops inbound): it opens every "
     "connection itself. It trains and counts as any peer, but never joins a group's communicator: each round "
     "its contribution goes to a full peer (its relay) over one TCP connection it opened, and the group's result "
     "comes back on it. It never serves state (others never wait for it) and loads state as a joiner."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "relay_clients", "8",
     "Client-mode peers this peer relays for at once (0 to 64; 0: none). Each costs its vector in and the "
     "result out per round, and a thread."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "progress_shard_peers", "32",
     "Progress records per DHT key (1 to 4096). A swarm of more than twice this many peers spreads its records "
     "over several keys, each peer's by its id, and a peer reads its own key and one other in turn, scaling the "
     "swarm's samples and rate up from them: a read costs the same at any size (sampled progress). Up to twice "
     "this many, every read sees every peer."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "progress_source", "auto",
     "Where a peer reads the others' progress records: \"peers\" (the records another full peer holds, asked of "
     "its state server over TCP, each request pushing this peer's own record there, so records spread from peer "
     "to peer: one request where a DHT read of N records costs 16 (N + 1) datagrams; a DHT read only every few "
     "seconds to half a minute, the swarm's together about one every 2 s), \"dht\" (every read from the DHT), or "
     "\"auto\" (peers in a swarm of 8 peers or more, the DHT below: a small swarm's DHT reads cost little, and "
     "find a new peer sooner)."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "snapshot_ahead", "auto",
     "When a full peer snapshots its state for joiners before one asks: \"always\" at every epoch's start (a "
     "joiner's download begins at once; two copies of the state an epoch), \"never\" (a joiner waits for this "
     "peer's next step boundary), or \"auto\" (at every epoch's start while the copies cost at most 2% of the "
     "epoch). With average_state_every > 0 only state-averaging epochs are served, so only they are snapshot."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "compression", "none",
     "How gradients travel in a group's averaging: \"none\" (f32), \"fp16\" or \"bf16\" (half the bytes; "
     "fp16 clamps beyond +-65504), or \"blockwise8\" (8 bits a value and one f32 scale per 256: about a quarter "
     "of the bytes, each value within 1/254 of its block's largest). Compressed, each member owns a slice, "
     "receives every member's copy of it, sums them in f32 and sends the mean back encoded (alltoall, then "
     "allgather). Every peer of a run must use the same value (part of the fingerprint)."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "state_compression", "none",
     "The same for state averaging's parameters and buffers: \"none\", \"fp16\", \"bf16\" or "
     "\"blockwise8\". Members that hold the same last synced parameters send their drift from them, so the "
     "codec rounds the drift, not the weights. The optimizer's statistics (average_optimizer_state) always travel "
     "in f32. Every peer of a run must use the same value."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "local_updates", "false",
     "Local updates (DiLoCo): the trainer's optimizer steps at every window on this peer's own gradients, and "
     "once an epoch the swarm averages each peer's pseudo-gradient (its parameters at the epoch's start minus "
     "now, weighted by samples) and applies it with an outer Nesterov optimizer (outer_lr, outer_momentum). "
     "Every peer then starts the next epoch from the same parameters, so no state averaging runs: with "
     "average_state_every > 0 each epoch's parameters are hashed instead, so that a joiner checks what it loads. "
     "A joiner loads the outer optimizer's state with the parameters. With target_group_size, each group steps "
     "its own anchor and the next epoch's groups take the mean of their members' anchors first. The model's "
     "buffers (BatchNorm statistics) are averaged after each round. A client_mode peer steps through its relay "
     "and loads the state where its outer state no longer matches the group's. With local_steps > 0, trainer.max_steps and the LR schedule count local steps (a multiple of local_steps); "
     "otherwise they count epochs. Every peer of a run must use the same value."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "local_steps", "0",
     "With local_updates: local steps per epoch on every peer (DiLoCo's H, e.g. 50 to 500); 0: an epoch ends "
     "when the swarm's samples reach target_batch_size, each peer stepping as often as its speed allows."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "outer_lr", "0.7",
     "With local_updates: the outer optimizer's learning rate (DiLoCo's 0.7)."},
    {sizeof(loom_option_decl), LOOM_OPTION_FLOAT, "outer_momentum", "0.9",
     "With local_updates: the outer optimizer's Nesterov momentum, 0 to below 1 (DiLoCo's 0.9; 0: plain SGD on "
     "the pseudo-gradient, which with outer_lr = 1 is averaging the parameters). On short runs from scratch "
     "(tens of outer steps) 0.9 overshoots: 0 to 0.5 trained better (bench/local_updates_quality.sh)."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "delay_averaging", "false",
     "Overlap a round with training: once a group has met and counted the target, its allreduce (or sliced "
     "mean) runs on a helper thread while this peer accumulates the next epoch, and the averaged gradients are "
     "applied at the first step boundary after it finished, one step late (hivemind's delayed parameter "
     "updates). Training waits for a round only when it takes longer than the next epoch's accumulation. The "
     "last epoch is averaged without delay. Every peer of a run must use the same value."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "balance_bandwidth", "false",
     "Average each round by point-to-point blocks (a reduce-scatter and an allgather) in which a member owns a "
     "part of the vector sized by its link's rate, measured from each block's time in earlier rounds, so that a "
     "member on a slow link moves less and every member finishes together (hivemind's load balancing). The first "
     "round and groups of two use equal parts. Uncompressed rounds on the training thread only (a codec or "
     "delay_averaging keeps equal parts). Every peer of a run must use the same value."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "top_up", "grants",
     "How a round whose group met short of target_batch_size trains the rest before the group meets again. "
     "\"grants\": each member asks the group's hub (the leader's state server) for a piece of what is left, "
     "trains it and asks again, the pieces shrinking as the rest does, so that members whose speeds swing take "
     "less; every round within one batch of the target (8 peers on 2 cores, grants in six runs against shares in "
     "one: the members waited 21 to 25% of an epoch against 34%, and the swarm averaged 1.06 to 1.2 times the "
     "samples a second; under churn, one run each, 50% against 58% and 1.18 times). A group without a hub tops up by shares; a member whose ask fails meets its group with what it trained, and a meeting short after grants tops up by shares. \"shares\": each "
     "member a share of the deficit by its training rate, fixed when the group meets; within one batch per "
     "member of the target. \"boxes\": time boxes first, every member training until one time at its own pace "
     "and the group meeting again, the last tenth of a second by shares; a round exceeds the target when the "
     "group's speed jumps within a box (under churn up to 1.4 times). "
     "Every peer of a run must use the same value."},
};

namespace {

struct Reader {
  const loom_host_v1 *host;
  std::string *why;

  bool text(OptionIndex i, std::string *out) {
    const char *value = nullptr;
    loom_status s = host->get_option(host->host_ctx, kOptions[i].name, &value);
    if (s == LOOM_ERR_UNAVAILABLE) {
      *why = std::string("option ") + kOptions[i].name + " is required: " + kOptions[i].help;
      return false;
    }
    if (s != LOOM_OK || value == nullptr) {
      *why = std::string("the host could not give option ") + kOptions[i].name;
      return false;
    }
    *out = value;
    return true;
  }
  bool number(OptionIndex i, double min, double max, double *out) {
    std::string t;
    if (!text(i, &t)) return false;
    errno = 0;
    char *end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < min || v > max) {
      std::ostringstream m;
      m << "option " << kOptions[i].name << " = " << t << " is not valid; use a number from " << min << " to " << max;
      *why = m.str();
      return false;
    }
    *out = v;
    return true;
  }
  bool integer(OptionIndex i, int64_t min, int64_t max, int64_t *out) {
    std::string t;
    if (!text(i, &t)) return false;
    errno = 0;
    char *end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
      *why = std::string("option ") + kOptions[i].name + " = " + t + " is not valid; use a whole number from " +
             std::to_string(min) + " to " + std::to_string(max);
      return false;
    }
    *out = v;
    return true;
  }
};

}  // namespace

bool valid_run_id(const std::string &id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.';
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string> split_list(const std::string &text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

bool valid_peer_address(const std::string &text, std::string *why) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    *why = "'" + text + "' is not host:port (e.g. 203.0.113.5:31337)";
    return false;
  }
  std::string port = text.substr(colon + 1);
  char *end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 1 || p > 65535) {
    *why = "'" + text + "' has port '" + port + "'; valid: 1 to 65535";
    return false;
  }
  return true;
}

bool read_options(const loom_host_v1 *host, Options *o, std::string *why) {
  Reader r{host, why};
  int64_t i = 0;
  std::string t;
  if (!r.integer(kOptTargetBatchSize, 1, int64_t(1) << 40, &i)) return false;
  o->target_batch_size = static_cast<uint64_t>(i);
  if (!r.text(kOptRunId, &o->run_id)) return false;
  if (!valid_run_id(o->run_id)) {
    *why = "option run_id = '" + o->run_id + "' is not valid; use 1 to 64 of [A-Za-z0-9_.-]";
    return false;
  }
  if (!r.integer(kOptBatchSize, 0, int64_t(1) << 32, &i)) return false;
  o->batch_size = static_cast<uint64_t>(i);
  if (!r.text(kOptInitialPeers, &t)) return false;
  o->initial_peers = split_list(t);
  for (const auto &peer : o->initial_peers) {
    std::string reason;
    if (!valid_peer_address(peer, &reason)) {
      *why = "option initial_peers: " + reason;
      return false;
    }
  }
  if (!r.text(kOptListen, &o->listen)) return false;
  // Checked here, in init, so a bad address is a configuration error (exit 2)
  // rather than a failed bind once training has started; IPv4 only, because
  // the DHT node binds IPv4. The numeric form is kept so every socket binds
  // exactly what was checked.
  loom_net::ListenAddress listen;
  std::string reason;
  in6_addr v6{};
  if (inet_pton(AF_INET6, o->listen.c_str(), &v6) == 1) {
    *why = "option listen = '" + o->listen + "' is not valid: it is an IPv6 address and the DHT node binds IPv4 "
           "only; use an IPv4 address of this machine (127.0.0.1: this machine only; 0.0.0.0: every interface)";
    return false;
  }
  if (!loom_net::resolve_listen_address(o->listen, AF_INET, std::chrono::seconds(5), &listen, &reason)) {
    *why = "option listen = '" + o->listen + "' is not valid: " + reason +
           "; use an IPv4 address of this machine (127.0.0.1: this machine only; 0.0.0.0: every interface) or a "
           "name that resolves to one";
    return false;
  }
  o->listen = listen.text;
  if (!r.integer(kOptPort, 0, 65535, &i)) return false;
  o->port = static_cast<uint16_t>(i);
  if (!r.text(kOptAnnounce, &o->announce)) return false;
  if (!r.number(kOptMatchmakingTime, 0.05, 3600, &o->matchmaking_time)) return false;
  if (!r.number(kOptAveragingTimeout, 0.1, 86400, &o->averaging_timeout)) return false;
  if (!r.integer(kOptMinGroupSize, 1, 4096, &o->min_group_size)) return false;
  if (!r.integer(kOptTargetGroupSize, 0, 4096, &i)) return false;
  if (i == 1) {
    *why = "option target_group_size = 1 is not valid: a group of one peer averages nothing; use 0 (one group "
           "of every ready peer) or a whole number from 2 to 4096";
    return false;
  }
  o->target_group_size = uint32_t(i);
  if (!r.integer(kOptAverageStateEvery, 0, int64_t(1) << 40, &o->average_state_every)) return false;
  if (!r.number(kOptLoadStateTimeout, 0.1, 86400, &o->load_state_timeout)) return false;
  if (!r.integer(kOptLoadDonorsAtOnce, 1, 16, &o->load_donors_at_once)) return false;
  if (!r.number(kOptBootstrapTimeout, 0.1, 86400, &o->bootstrap_timeout)) return false;
  if (!r.integer(kOptMinPeers, 1, 4096, &o->min_peers)) return false;
  if (!r.text(kOptCollective, &o->collective)) return false;
  if (!r.text(kOptVerbose, &t)) return false;
  o->verbose = t == "true";
  if (!r.number(kOptReportQuietAfter, 0, 86400, &o->report_quiet_after)) return false;
  if (!r.text(kOptAverageOptimizerState, &t)) return false;
  o->average_optimizer_state = t == "true";
  if (!r.text(kOptScaledAllreduce, &t)) return false;
  o->scaled_allreduce = t == "true";
  if (!r.integer(kOptServeMaxTransfers, 1, 1024, &i)) return false;
  o->serve.max_transfers = int(i);
  if (!r.integer(kOptServeMaxPerAddress, 1, 1024, &i)) return false;
  o->serve.max_pending_per_address = int(i);
  if (!r.number(kOptServeRequestsPerMinute, 1, 1e6, &o->serve.requests_per_minute)) return false;
  double idle = 0;
  if (!r.number(kOptServeIdleTimeout, 0.1, 3600, &idle)) return false;
  o->serve.idle_timeout = std::chrono::milliseconds(int64_t(idle * 1000));
  if (!r.text(kOptAggregation, &t)) return false;
  if (t != "mean" && t != "centered_clip") {
    *why = "option aggregation = '" + t + "' is not valid; use \"mean\" or \"centered_clip\"";
    return false;
  }
  o->centered_clip = t == "centered_clip";
  if (!r.number(kOptClipRadius, 0.01, 1e6, &o->clip_radius)) return false;
  if (!r.integer(kOptClipIterations, 1, 100, &o->clip_iterations)) return false;
  if (!r.text(kOptRole, &t)) return false;
  if (t != "trainer" && t != "checkpointer") {
    *why = "option role = '" + t + "' is not valid; use \"trainer\" or \"checkpointer\"";
    return false;
  }
  o->checkpointer = t == "checkpointer";
  if (!r.text(kOptCheckpointDir, &o->checkpoint_dir)) return false;
  if (o->checkpointer && o->checkpoint_dir.empty()) {
    *why = "option checkpoint_dir is required with role = \"checkpointer\": the folder where it keeps the swarm's "
           "state";
    return false;
  }
  if (!r.integer(kOptCheckpointEvery, 0, int64_t(1) << 40, &o->checkpoint_every)) return false;
  if (o->checkpoint_every == 0) o->checkpoint_every = o->average_state_every > 0 ? o->average_state_every : 10;
  if (!r.text(kOptProgressReads, &t)) return false;
  if (t != "every_step" && t != "eta") {
    *why = "option progress_reads = '" + t + "' is not valid; use \"every_step\" or \"eta\"";
    return false;
  }
  o->progress_reads_eta = t == "eta";
  if (!r.text(kOptClientMode, &t)) return false;
  o->client_mode = t == "true";
  if (!r.integer(kOptRelayClients, 0, 64, &o->relay_clients)) return false;
  if (!r.integer(kOptProgressShardPeers, 1, 4096, &o->progress_shard_peers)) return false;
  if (!r.text(kOptProgressSource, &t)) return false;
  if (t != "peers" && t != "dht" && t != "auto") {
    *why = "option progress_source = '" + t + "' is not valid; use \"auto\", \"peers\" or \"dht\"";
    return false;
  }
  o->progress_source = t == "peers" ? Options::ProgressSource::peers
                       : t == "dht" ? Options::ProgressSource::dht
                                    : Options::ProgressSource::automatic;
  if (!r.text(kOptSnapshotAhead, &t)) return false;
  if (t != "auto" && t != "always" && t != "never") {
    *why = "option snapshot_ahead = '" + t + "' is not valid; use \"auto\", \"always\" or \"never\"";
    return false;
  }
  o->snapshot_ahead = t == "always"  ? Options::SnapshotAhead::always
                      : t == "never" ? Options::SnapshotAhead::never
                                     : Options::SnapshotAhead::automatic;
  for (auto [index, codec] : {std::pair{kOptCompression, &o->compression}, {kOptStateCompression, &o->state_compression}}) {
    if (!r.text(index, &t)) return false;
    if (!parse_codec(t, codec)) {
      *why = std::string("option ") + kOptions[index].name + " = '" + t +
             "' is not valid; use \"none\", \"fp16\", \"bf16\" or \"blockwise8\"";
      return false;
    }
  }
  if (!r.text(kOptLocalUpdates, &t)) return false;
  o->local_updates = t == "true";
  if (!r.integer(kOptLocalSteps, 0, int64_t(1) << 32, &o->local_steps)) return false;
  if (!r.number(kOptOuterLr, 1e-6, 100, &o->outer_lr)) return false;
  if (!r.number(kOptOuterMomentum, 0, 0.999999, &o->outer_momentum)) return false;
  if (!r.text(kOptDelayAveraging, &t)) return false;
  o->delay_averaging = t == "true";
  if (!r.text(kOptBalanceBandwidth, &t)) return false;
  o->balance_bandwidth = t == "true";
  if (!r.text(kOptTopUp, &t)) return false;
  if (t != "shares" && t != "boxes" && t != "grants") {
    *why = "option top_up = '" + t + "' is not valid; use \"shares\", \"boxes\" or \"grants\"";
    return false;
  }
  o->top_up = t == "boxes" ? Options::TopUp::boxes : t == "grants" ? Options::TopUp::grants : Options::TopUp::shares;
  if (o->delay_averaging && (o->local_updates || o->client_mode)) {
    *why = std::string("option delay_averaging = true is not valid with ") +
           (o->local_updates ? "local_updates = true (an outer step must finish before the next epoch starts "
                               "from its anchor)"
                             : "client_mode = true (a client's round goes through its relay, which does not "
                               "delay it)");
    return false;
  }
  if (!o->local_updates && o->local_steps > 0) {
    *why = "option local_steps = " + std::to_string(o->local_steps) +
           " is set without local_updates = true; set local_updates = true, or leave local_steps at 0";
    return false;
  }
  if (o->local_updates) {
    if (o->average_optimizer_state) {
      *why = "option local_updates = true is not valid with average_optimizer_state = true (each peer's own optimizer "
             "keeps its statistics, as in DiLoCo; the outer step moves the parameters only)";
      return false;
    }
  }
  if (o->client_mode && o->checkpointer) {
    *why = "option client_mode = true is not valid with role = \"checkpointer\": a checkpointer serves the state to "
           "joiners, which needs connections in; run it where peers can reach it";
    return false;
  }
  if (!r.text(kOptSwarmKey, &o->swarm_key_path)) return false;
  if (!o->swarm_key_path.empty()) {
    loom_key::SwarmKey key;
    std::string reason;
    if (!loom_key::read_key(o->swarm_key_path, &key, &reason)) {
      *why = "option swarm_key: " + reason;
      return false;
    }
    o->swarm_key = key;
    key.fill(0);
  }
  return true;
}

}  // namespace loom_collab
