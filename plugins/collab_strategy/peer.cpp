// SPDX-License-Identifier: Apache-2.0
// Peer lifecycle and the background progress thread. The rounds are in
// round.cpp, loading the swarm's state in state_load.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "dht_value.h"
#include "peer.h"

#include "../common/huge_pages.h"

namespace loom_collab {

int64_t wall_ms() { return swarm_value::now_ms(); }

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

std::string milliseconds_text(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", std::chrono::duration<double, std::milli>(d).count());
  return text;
}

namespace {


// The IPv4 address this machine reaches the outside from: connecting a UDP
// socket sends nothing but makes the kernel choose the source address.
std::string outward_address() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(9);
  ::inet_pton(AF_INET, "192.0.2.1", &remote.sin_addr);  // TEST-NET-1: never reached
  std::string out = "127.0.0.1";
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&remote), sizeof remote) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0) {
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) && std::strcmp(text, "0.0.0.0") != 0) out = text;
  }
  ::close(fd);
  return out;
}

std::string shell_quote(const std::string &arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,@%+") ==
                          std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// This process's command line, as the user can paste it on another machine.
std::string own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out, arg;
  std::istringstream args(all);
  while (std::getline(args, arg, '\0')) out += (out.empty() ? "" : " ") + shell_quote(arg);
  return out.empty() ? "loom train CONFIG" : out;
}

// A TCP port free on `host` now (0: none found): the DHT's UDP port is
// picked as one, so that the state server gets the same number. The DHT's
// random UDP port's TCP twin was at times taken by another process's
// connection (the state server then listened elsewhere, and a joiner that
// knew only the DHT's address could not ask it for the model).
uint16_t free_tcp_port(const std::string &host) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &sin.sin_addr) != 1) return 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  socklen_t len = sizeof sin;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&sin), sizeof sin) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&sin), &len) == 0)
    port = ntohs(sin.sin_port);
  ::close(fd);
  return port;
}

}  // namespace

uint64_t views_numel(const std::vector<FloatView> &views) {
  uint64_t n = 0;
  for (const auto &v : views) n += v.numel;
  return n;
}

void copy_from_views(const std::vector<FloatView> &views, float *out) {
  for (const auto &v : views) {
    std::memcpy(out, v.data, v.numel * sizeof(float));
    out += v.numel;
  }
}

void copy_into_views(const float *in, const std::vector<FloatView> &views) {
  for (const auto &v : views) {
    std::memcpy(v.data, in, v.numel * sizeof(float));
    in += v.numel;
  }
}

float *tiled_range(std::vector<FloatView> views) {
  // The host lays gradients out back to front (backward's order): whether
  // they tile one range is a question of addresses, not of the list's order.
  std::sort(views.begin(), views.end(), [](const FloatView &a, const FloatView &b) { return a.data < b.data; });
  for (size_t i = 1; i < views.size(); ++i)
    if (views[i - 1].data + views[i - 1].numel != views[i].data) return nullptr;
  return views.empty() ? nullptr : views.front().data;
}

bool float_view(const DLTensor &t, FloatView *out) {
  if (t.device.device_type != kDLCPU || t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1)
    return false;
  uint64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= static_cast<uint64_t>(t.shape[d]);
  if (t.strides != nullptr) {  // must be compact row-major
    int64_t expect = 1;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expect) return false;
      expect *= t.shape[d];
    }
  }
  out->data = reinterpret_cast<float *>(static_cast<char *>(t.data) + t.byte_offset);
  out->numel = n;
  return true;
}

Peer::Peer(const loom_host_v1 *host, Options options, const loom_collective_v1 *collective,
           loom_collective_ctx *collective_instance)
    : host_(host),
      opt_(std::move(options)),
      collective_(collective),
      collective_instance_(collective_instance),
      id_(identity_.id()),
      run_(run_hash(opt_.run_id)) {
  logfn_ = [this](Level level, const std::string &message) { log(level, message); };
}

Peer::~Peer() { teardown(); }

void Peer::log(Level level, const std::string &message) const {
  if (host_->log) host_->log(host_->host_ctx, static_cast<loom_log_level>(level), message.c_str());
}

void Peer::detail(const std::string &message) const { log(opt_.verbose ? Level::info : Level::debug, message); }

std::string Peer::join_hint() const {
  const std::string address = announce_host_ + ":" + std::to_string(port_);
  std::string hint = "Other peers can join this run with:\n  LOOM_INITIAL_PEERS=" + address + " " + own_command() +
                     "\n  or initial_peers = [\"" + address + "\"] under [strategy.options]";
  if (opt_.swarm_key)
    return hint + "\n  and a copy of the swarm key file " + opt_.swarm_key_path +
           " (swarm_key, or LOOM_SWARM_KEY): only holders of that key find or read this swarm's records";
  return hint + "\n  This swarm is open: anyone who reaches this peer and knows run_id '" + opt_.run_id +
         "' can join it, read the model and average into it. Give every peer a swarm key (loom swarm keygen FILE, "
         "then swarm_key = FILE) to close it.";
}

loom_status Peer::setup(const loom_training_state_v1 &state, std::string *why) {
  // Only what the host's struct has: an older host's is shorter.
  std::memset(&state_, 0, sizeof state_);
  std::memcpy(&state_, &state, std::min<size_t>(state.struct_size, sizeof state_));
  max_steps_ = state.struct_size >= LOOM_TRAINING_STATE_V1_1_SIZE ? state.max_steps : -1;
  if (opt_.local_updates && opt_.local_steps > 0) {
    // The trainer counts local steps (global_step); the swarm, epochs of them.
    if (max_steps_ > 0 && max_steps_ % opt_.local_steps != 0) {
      *why = "trainer.max_steps = " + std::to_string(max_steps_) + " is not a whole number of epochs of local_steps = " +
             std::to_string(opt_.local_steps) + " local steps; use a multiple of " + std::to_string(opt_.local_steps);
      return LOOM_ERR_INVALID_ARGUMENT;
    }
    if (max_steps_ > 0) max_steps_ /= opt_.local_steps;
  }
  for (uint32_t i = 0; i < state.num_params; ++i) {
    FloatView p, g;
    if (!float_view(state.params[i], &p) || !float_view(state.grads[i], &g) || p.numel != g.numel) {
      *why = "parameter " + std::to_string(i) +
             " is not a compact float32 CPU tensor with a gradient of its shape; collab averages only those";
      return LOOM_ERR_UNSUPPORTED;
    }
    params_.push_back(p);
    grads_.push_back(g);
    numel_ += p.numel;
  }
  mark_synced();  // every peer of a run starts from the same parameters, or loads them below
  if (opt_.local_updates) {
    outer_.anchor.resize(numel_);
    copy_from_views(params_, outer_.anchor.data());
    outer_.momentum.assign(numel_, 0.0f);
  }
  {
    std::vector<FloatView> views = params_;
    append_buffer_views(&views);
    for (const auto &v : views) state_numel_ += v.numel;
  }
  const bool scaled = opt_.scaled_allreduce && collective_->struct_size >= LOOM_COLLECTIVE_V1_3_SIZE &&
                      collective_->allreduce_scaled != nullptr &&
                      (collective_->info->capabilities & LOOM_CAP_SCALED_ALLREDUCE);
  float *flat = tiled_range(grads_);
  // A delayed round leaves the host's gradients to the next epoch: its sum
  // goes through a copy, applied later.
  if (scaled && flat && !opt_.delay_averaging) flat_grads_ = flat;
  const char *how = flat_grads_ ? "one flat vector, the average written straight into it by allreduce_scaled"
                    : scaled ? "not one flat vector: averaged through a copy"
                    : opt_.delay_averaging ? "averaged through a copy, applied a step late (delay_averaging)"
                    : !opt_.scaled_allreduce ? "averaged through a copy (scaled_allreduce = false)"
                                             : "the collective has no allreduce_scaled: averaged through a copy";
  detail(std::string("gradients: ") + how);
  fingerprint_text_ = fingerprint_text(state, opt_, flat_grads_ != nullptr);
  fingerprint_ = fingerprint_of(fingerprint_text_);
  round_space_ = round_space(opt_.run_id, fingerprint_);
  since_ms_ = wall_ms();
  if (opt_.average_optimizer_state &&
      (state.struct_size < LOOM_TRAINING_STATE_V1_2_SIZE || state.optimizer_state == nullptr))
    log(Level::warn, "average_optimizer_state is set, but this host lends no optimizer statistics (it predates "
                     "plugin ABI 1.2): only the parameters are averaged");
  epoch_ = opt_.local_updates && opt_.local_steps > 0 ? state.start_step / opt_.local_steps : state.start_step;
  epoch_start_ms_ = wall_ms();
  if (!preflight_model(why)) return LOOM_ERR_INVALID_ARGUMENT;
  try {
    DhtConfig config;
    config.listen_host = opt_.listen;
    config.port = opt_.port;
    config.bootstrap = opt_.initial_peers;
    config.key = opt_.swarm_key;
    config.log = logfn_;
    const uint16_t paired = opt_.port == 0 && !opt_.client_mode ? free_tcp_port(opt_.listen) : 0;
    if (paired != 0) {
      config.port = paired;
      try {
        dht_ = std::make_unique<SwarmDht>(config);
      } catch (const std::exception &) {
        config.port = 0;  // its UDP twin is taken: any port, as before
      }
    }
    if (!dht_) dht_ = std::make_unique<SwarmDht>(config);
    port_ = dht_->port();
    push_ = std::make_shared<ProgressPush>(run_, opt_.swarm_key);
    hub_ = std::make_shared<OobHub>(run_, opt_.swarm_key);
    // A client-mode peer accepts no connection: no state server.
    if (!opt_.client_mode) {
      server_ = std::make_unique<StateServer>(opt_.listen, port_, run_, logfn_, opt_.serve, opt_.swarm_key);
      server_->set_progress_push([push = push_](Bytes b) { push->receive(std::move(b)); });
      server_->set_oob_handler([hub = hub_](const Bytes &part, std::chrono::milliseconds hold,
                                            const std::function<bool()> &stop,
                                            std::string *why) { return hub->serve(part, hold, stop, why); });
      // A joiner that asks waits for this peer's next step boundary and the
      // snapshot then (a 130 MB charlm state took 2 to 3 s to serialise and
      // hand over on a loaded machine, so 2 s always answered "not ready"),
      // below the joiner's 10 s stall timeout. Joiners ask three donors at
      // once and take the first that is ready.
      server_->set_wait_for_publish(std::chrono::seconds(6));
      if (opt_.relay_clients > 0 && !opt_.checkpointer)
        server_->set_relay([this](const std::string &client, RelayMessage &m,
                                  const std::function<bool()> &stop) { relay_contribution(client, m, stop); },
                           int(opt_.relay_clients), std::max(numel_, state_numel_));
    }
  } catch (const std::exception &e) {
    *why = std::string("could not start the swarm node: ") + e.what();
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  announce_host_ = !opt_.announce.empty() ? opt_.announce
                   : (opt_.listen != "0.0.0.0" ? opt_.listen : outward_address());
  if (opt_.client_mode) {
    log(Level::info, "peer " + std::to_string(id_) + " of run '" + opt_.run_id +
                         "' in client mode: it accepts no connection (its DHT node on UDP port " + std::to_string(port_) +
                         " answers only what it asked), serves no state, and averages through a full peer");
  } else {
    log(Level::info, "peer " + std::to_string(id_) + " of run '" + opt_.run_id + "' listening on " + announce_host_ + ":" +
                         std::to_string(port_) + " (DHT over UDP, state over TCP" +
                         (server_->port() != port_ ? " port " + std::to_string(server_->port()) : "") + ")");
    log(Level::info, join_hint());
  }
  if (!opt_.initial_peers.empty()) {
    std::string list;
    for (const auto &p : opt_.initial_peers) list += (list.empty() ? "" : ", ") + p;
    if (!dht_->wait_connected(std::chrono::milliseconds(int64_t(opt_.bootstrap_timeout * 1000)))) {
      *why = "no initial peer answered within " + seconds_text(opt_.bootstrap_timeout) + " s (" + list +
             "); check the addresses, that those peers run, and that UDP and TCP reach them";
      return LOOM_ERR_UNAVAILABLE;
    }
    log(Level::info, "joined the swarm through " + list);
    if (!opt_.client_mode && server_ && !opt_.checkpointer) check_reachable();
  }
  thread_ = std::thread([this] { background(); });
  set_up_ = true;

  if (opt_.min_peers > 1) {
    const auto until = Clock::now() + std::chrono::milliseconds(int64_t(opt_.bootstrap_timeout * 1000));
    log(Level::info, "waiting for " + std::to_string(opt_.min_peers) + " peers (min_peers) before training");
    while (peers_seen() < size_t(opt_.min_peers)) {
      if (misfit(why)) return LOOM_ERR_INVALID_ARGUMENT;
      // Asked to stop while waiting: the trainer stops before its first
      // step, and teardown says goodbye.
      if (stopping()) break;
      // Peers of another model are in view: the count will not grow, and
      // the true reason is check_model's verdict, which needs its records
      // to hold for a moment (kMisfitConfirmMs). A loaded machine may bring
      // them late, so the verdict gets its moment past the deadline.
      const auto grace = suspect_misfit_ ? std::chrono::milliseconds(kMisfitVerdictGraceMs) : Clock::duration(0);
      if (Clock::now() >= until + grace) {
        *why = "only " + std::to_string(peers_seen()) + " of min_peers = " + std::to_string(opt_.min_peers) +
               " peers were in the swarm after bootstrap_timeout = " + seconds_text(opt_.bootstrap_timeout) + " s";
        return LOOM_ERR_TIMEOUT;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // A joining peer first catches up with the swarm: read the others'
  // progress (each republishes at least every second), then catch up with
  // the highest epoch if that is ahead of ours: its state, or in a slow
  // swarm its last sync point's and a move to it (catch_up).
  if (!opt_.initial_peers.empty()) {
    // Long enough for every peer's record to arrive (each republishes every
    // second) and for this peer to be sure whether it trains the swarm's
    // model (model_check.cpp).
    // Where peers read each other's tables, the DHT's copies of records are
    // up to kPushRepublishMs old (a fast swarm passes many epochs in that
    // time): the epoch to catch up with comes from a table.
    const auto until = Clock::now() + std::chrono::milliseconds(4 * kRepublishMs);
    auto settled = [&] {
      return newest_epoch() >= 0 && checked_model_ && !suspect_misfit_ &&
             (!progress_from_peers_now() || tables_.load() > 0);
    };
    while (Clock::now() < until && !misfit(why) && !settled() && !stopping())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (misfit(why)) return LOOM_ERR_INVALID_ARGUMENT;
    // The swarm's epoch, or a checkpointer's when no trainer is left.
    const int64_t newest = std::max(view().global_epoch, newest_epoch());
    if (newest > epoch_ && !stopping()) {
      std::string reason;
      if (!catch_up(newest, true, &reason))
        log(Level::warn, "could not load the swarm's state (" + reason + "); training from this peer's own state");
    }
  }
  warm_serving();
  serve_if_wanted();
  wake_background();
  return LOOM_OK;
}

loom_status Peer::teardown() {
  if (!set_up_) return LOOM_OK;
  set_up_ = false;
  // Mates that may wait for this peer at their group's next meeting: they
  // hear its goodbye first, directly, rather than at their next read.
  const std::vector<Mate> mates = waiting_mates();
  drop_prematch();
  drop_delayed();
  if (comm_) comm_.reset();
  kept_.clear();
  stop_ = true;
  wake_background();
  if (thread_.joinable()) thread_.join();
  // Goodbye: others stop counting this peer now rather than at expiry.
  flags_ |= ProgressRecord::kLeft;
  bool said = dht_ != nullptr;
  if (dht_) {
    const Bytes bye = encode(run_, own_record(), identity_);
    push_goodbye(bye, mates);
    if (written_levels_.empty()) written_levels_.push_back(0);
    for (int level : written_levels_)
      said = dht_->put(progress_shard_key(opt_.run_id, level, shard_of(id_, level)), id_, bye, kRecordTtl,
                       std::chrono::milliseconds(500)) && said;
    // Readers of peers' tables read the DHT seldom: a few of them hear it
    // pushed, and their tables spread it.
    if (progress_from_peers_now()) push_goodbye(bye);
  }
  {
    const double secs = std::max(1e-3, double(wall_ms() - since_ms_) / 1000.0);
    char line[768];
    std::snprintf(line, sizeof line,
                  "read the swarm's progress %llu times in %.0f s (%.1f a second), %llu records (%.1f a read); "
                  "%llu DHT reads (%.2f a second), %llu of peers' tables (%llu failed, %llu bytes); answered %llu "
                  "progress requests; took %llu records pushed with them (%llu did not open); checked %llu records' "
                  "signatures, and %llu records read again as they were",
                  static_cast<unsigned long long>(progress_reads_), secs, double(progress_reads_) / secs,
                  static_cast<unsigned long long>(records_read_),
                  progress_reads_ ? double(records_read_) / double(progress_reads_) : 0.0,
                  static_cast<unsigned long long>(reads_.dht_reads), double(reads_.dht_reads) / secs,
                  static_cast<unsigned long long>(reads_.pulls), static_cast<unsigned long long>(reads_.pull_failures),
                  static_cast<unsigned long long>(reads_.pull_bytes),
                  static_cast<unsigned long long>(server_ ? server_->progress_served() : 0),
                  static_cast<unsigned long long>(push_ ? push_->received() : 0),
                  static_cast<unsigned long long>(push_ ? push_->unopened() : 0),
                  static_cast<unsigned long long>(verified_.checks()), static_cast<unsigned long long>(verified_.hits()));
    detail(line);
    std::snprintf(line, sizeof line,
                  "progress keys read from the DHT: %llu due (%lld to %lld ms apart), %llu that no known peer writes "
                  "to, %llu whose peer's table failed, %llu probes of another level; %llu tables asked of peers whose "
                  "records were past the live horizon (none live)",
                  static_cast<unsigned long long>(reads_.keys_due), static_cast<long long>(reads_.shortest_interval_ms),
                  static_cast<long long>(reads_.longest_interval_ms),
                  static_cast<unsigned long long>(reads_.keys_nobody),
                  static_cast<unsigned long long>(reads_.keys_failed),
                  static_cast<unsigned long long>(reads_.keys_probed),
                  static_cast<unsigned long long>(reads_.stale_pulls));
    detail(line);
    if (dht_) {
      // What the node asked of others, by kind (datagrams it sent are more:
      // each get of N values pages through N + 1 requests per node).
      const SwarmDht::Requests q = dht_->requests_sent();
      std::snprintf(line, sizeof line,
                    "DHT requests sent in %.0f s: %llu gets, %llu listens, %llu puts, %llu finds, %llu pings; %llu "
                    "watches begun",
                    secs, static_cast<unsigned long long>(q.get), static_cast<unsigned long long>(q.listen),
                    static_cast<unsigned long long>(q.put), static_cast<unsigned long long>(q.find),
                    static_cast<unsigned long long>(q.ping), static_cast<unsigned long long>(dht_->watches_started()));
      detail(line);
      detail("DHT operations this peer began, by key: " + dht_->ops_by_kind());
    }
    // Formats every search's OpenDHT log (hundreds of them): only when shown.
    if (dht_ && opt_.verbose) {
      const SwarmDht::Held held = dht_->held();
      detail("the DHT node holds " + std::to_string(held.searches) + " searches over " +
             std::to_string(held.search_nodes) + " nodes (" + std::to_string(held.silent_nodes) +
             " of them silent: peers gone) and " + std::to_string(held.stored_values) + " values others put (" +
             std::to_string(held.stored_bytes) + " bytes)");
    }
  }
  log(Level::info, "handed the collective " + std::to_string(GroupComm::payload_bytes()) +
                       " payload bytes in rounds and state averaging (what this peer's calls asked it to move); " +
                       std::to_string(kept_.taken()) + " rounds averaged over the communicator kept from the last");
  log(Level::info, GroupComm::exchange_text() + "; " + std::to_string(hub_ ? hub_->parts() : 0) +
                       " parts came to this peer's hub, which answered " +
                       std::to_string(hub_ ? hub_->grants_given() : 0) + " asks for top-up grants");
  uint64_t wire_sent = 0, wire_received = 0;
  if (GroupComm::wire_bytes(&wire_sent, &wire_received))
    log(Level::info, "the collective counted " + std::to_string(wire_sent) + " bytes sent and " +
                         std::to_string(wire_received) + " received in rounds and state averaging (its comm_stats)");
  // A relay's clients may be a moment behind it at the last epoch: while
  // their sessions stay open (a client closes its own when it ends) their
  // late contributions get its last round's mean, so they end as it did.
  // Bounded: a client that trains on longer is left.
  if (server_ && server_->relaying() > 0) {
    const auto until = Clock::now() + std::chrono::milliseconds(int64_t(std::min(10.0, opt_.averaging_timeout) * 1000));
    while (server_->relaying() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (server_->relaying() > 0)
      detail("left " + std::to_string(server_->relaying()) + " client-mode peer(s) still relaying through this peer");
  }
  log(Level::info, std::string("left the swarm at epoch ") + std::to_string(epoch_.load()) +
                       (said ? "; its goodbye is published, so the others stop counting this peer now"
                             : "; its goodbye could not be published: the others stop counting it when its record expires"));
  server_.reset();
  dht_.reset();
  return LOOM_OK;
}

std::string Peer::status_line() const {
  SwarmView v = set_up_ ? view() : SwarmView{};
  std::ostringstream line;
  line << v.peers << (v.peers == 1 ? " peer" : " peers") << ", epoch " << epoch_.load() << ", " << v.samples << "/"
       << opt_.target_batch_size << " samples";
  status_ = line.str();
  return status_;
}

// ---- State ------------------------------------------------------------------

bool Peer::servable() const {
  // A state a joiner can check is one of a sync point: served only there.
  // Under local updates a snapshot carries the anchor, the sync point's
  // state, whatever local steps the host's part holds.
  return server_ && (opt_.average_state_every == 0 || at_sync_ || opt_.local_updates);
}

bool Peer::serve_if_wanted() {
  if (!servable() || !server_->wanted()) return false;
  publish_snapshot("for a joining peer");
  return true;
}

void Peer::serve_at_epoch_start(int64_t epoch_ms) {
  if (opt_.checkpointer || !servable() || serve_if_wanted()) return;
  using Ahead = Options::SnapshotAhead;
  if (opt_.snapshot_ahead == Ahead::never || finished()) return;  // after the last epoch nobody trains on
  // A transfer still reading the last snapshot would make this copy take
  // fresh memory; joiners that come meanwhile ask as before.
  if (server_->active() > 0) return;
  if (opt_.snapshot_ahead == Ahead::automatic) {
    // Warm buffers are what make it cheap (warm_serving): a state left cold
    // is snapshot on request only. A first snapshot measures the cost.
    if (!warmed_) return;
    // A cost once measured under a passing load would otherwise hold for
    // good: every 32nd epoch skipped measures it again.
    // With state averaging only sync points are served, so one snapshot
    // is paid for over the epochs until the next: a slow swarm's joiners
    // ask for the last sync point (catch_up), which a peer that did not
    // snapshot it can no longer send.
    const int64_t period = opt_.average_state_every > 0 && !opt_.local_updates ? opt_.average_state_every : 1;
    if (!snapshot_ahead_pays(snapshot_ms_, double(epoch_ms) * double(period))) {
      if (ahead_skipped_++ == 0) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "snapshot_ahead = \"auto\": a snapshot took %.1f ms, over %.0f%% of the %lld ms of %lld "
                      "epoch(s) it serves; joiners wait for this peer's next step instead (\"always\" snapshots "
                      "anyway)",
                      snapshot_ms_, 100 * kSnapshotAheadShare, static_cast<long long>(epoch_ms * period),
                      static_cast<long long>(period));
        detail(line);
      }
      if (ahead_skipped_ % 32 != 0) return;
    } else {
      ahead_skipped_ = 0;
    }
  }
  publish_snapshot("ahead of any request");
}

void Peer::publish_snapshot(const char *why) {
  const uint8_t *data = nullptr;
  size_t len = 0;
  const auto t0 = Clock::now();
  if (snapshot_state(&data, &len) != LOOM_OK) {
    log(Level::warn, std::string("could not snapshot the training state ") + why);
    return;
  }
  const auto t1 = Clock::now();
  server_->publish_copy(epoch_.load(), data, len);
  const auto t2 = Clock::now();
  snapshot_ms_ = std::chrono::duration<double, std::milli>(t2 - t0).count();
  auto ms = [](Clock::duration d) { return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()); };
  detail("published a state snapshot of epoch " + std::to_string(epoch_.load()) + " (" + std::to_string(len) +
         " bytes) " + why + " (serialised in " + ms(t1 - t0) + " ms, handed over in " + ms(t2 - t1) + " ms)");
}

void Peer::warm_serving() {
  // A joiner waits for a donor's snapshot: the host's serialisation and the
  // server's copy of it, each into memory touched for the first time on a
  // donor's first serve (0.3-0.6 s each for a 130 MB charlm state under
  // load, 7 ms each once mapped). Both are faulted in here, at setup, so
  // that the wait is one step and two copies. It costs what the first serve
  // would have: two states' worth of memory, held from now on; a state
  // over an eighth of the machine's memory is left cold.
  if (!server_ || opt_.checkpointer) return;
  const uint64_t memory = loom_plugin_common::physical_memory();
  uint64_t params = 0;  // an Adam state is about three times the parameters
  for (const auto &p : params_) params += p.numel * sizeof(float);
  if (3 * params > memory / 8) return;
  warmed_ = true;
  const auto t0 = Clock::now();
  const uint8_t *data = nullptr;
  size_t len = 0;
  if (snapshot_state(&data, &len) != LOOM_OK) return;
  server_->prepare(len);
  detail("state snapshot buffers of " + std::to_string(len) + " bytes ready for joining peers (" +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()) + " ms)");
}

void Peer::note_loss() {
  double loss = 0;
  const bool has = state_.struct_size >= LOOM_TRAINING_STATE_V1_10_SIZE && state_.window_loss != nullptr &&
                   state_.window_loss(state_.user, &loss) == LOOM_OK;
  report_.note_loss(epoch_.load(), has ? std::optional<double>(loss) : std::nullopt);
}

void Peer::zero_grads() {
  for (auto &g : grads_) std::memset(g.data, 0, g.numel * sizeof(float));
}

}  // namespace loom_collab
