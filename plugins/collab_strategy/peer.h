/* SPDX-License-Identifier: Apache-2.0 */
// One swarm peer: the state behind a collab strategy instance. It owns the
// DHT node, the state server, the background thread that publishes this
// peer's progress and reads everyone else's, and the rounds (matchmaking,
// gradient and state averaging) that the training thread runs in its hooks.
#ifndef LOOM_COLLAB_PEER_H
#define LOOM_COLLAB_PEER_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bandwidth.h"
#include "compression.h"
#include "dht.h"
#include "fingerprint.h"
#include "group_comm.h"
#include "health.h"
#include "kept_comm.h"
#include "log.h"
#include "loom/strategy.h"
#include "observer_report.h"
#include "oob_hub.h"
#include "options.h"
#include "outer_step.h"
#include "peer_util.h"
#include "progress_push.h"
#include "progress_shards.h"
#include "quiet_peer.h"
#include "records.h"
#include "verified_progress.h"
#include "round_state.h"
#include "relay.h"
#include "state_check.h"
#include "state_transfer.h"
#include "../common/huge_pages.h"
#include "tracker.h"
#include "training_rate.h"

namespace loom_collab {

class Peer {
 public:
  // collective: the opened collective plugin (vtable and instance).
  Peer(const loom_host_v1 *host, Options options, const loom_collective_v1 *collective,
       loom_collective_ctx *collective_instance);
  ~Peer();
  Peer(const Peer &) = delete;
  Peer &operator=(const Peer &) = delete;

  loom_status setup(const loom_training_state_v1 &state, std::string *why);
  loom_status teardown();
  loom_status after_backward(uint64_t local_samples, loom_step_decision *decision, std::string *why);
  loom_status after_optimizer_step(std::string *why);
  // The host's load_state (ABI 1.8): the newest state, at this peer's epoch
  // or the swarm's if later, from a donor, checked as a joiner's is.
  loom_status load_newest(std::string *why);

  uint64_t id() const { return id_; }
  int64_t epoch() const { return epoch_.load(); }
  // The trainer's step (its LR schedule and max_steps follow it): the epoch,
  // or under local_steps the local steps the swarm's epochs and this one's
  // add up to. Training thread.
  int64_t global_step() const {
    return opt_.local_updates && opt_.local_steps > 0 ? epoch_.load() * opt_.local_steps + int64_t(inner_steps_)
                                                      : epoch_.load();
  }
  // The swarm reached max_steps (this peer may have jumped there by loading state).
  bool finished() const { return max_steps_ >= 0 && epoch_.load() >= max_steps_; }
  // Whether `epoch` is the run's last (its step reaches max_steps).
  bool is_last_epoch(int64_t epoch) const { return max_steps_ >= 0 && epoch + 1 >= max_steps_; }
  std::string status_line() const;

 private:
  // Progress records (peer_progress.cpp): the DHT's expiry of one, and how
  // often one is put again when nothing changed.
  static constexpr auto kRecordTtl = std::chrono::seconds(10);
  static constexpr int64_t kRecordTtlMs = 10 * 1000;  // a peer's, unrefreshed
  static constexpr int64_t kRepublishMs = 1000;
  static constexpr int64_t kPushRepublishMs = 4000;  // the DHT copy, while pulls push the record (< kRecordLiveMs)
  static constexpr int64_t kRecordLiveMs = 5000;  // a record younger than this is a live peer
  // ... kRecordTtlMs under sampled progress, where a record comes in a
  // peer's table, pushed there when its owner last pulled it: about every
  // S seconds in a shard of S peers (with progress_shard_peers = 8 at 64
  // peers, runs 27 to 29 in README: 403 of 422 quiet lines at that horizon).
  int64_t live_ms() const;
  static constexpr int64_t kClockSlackMs = 2000;  // peers' wall clocks may differ by this much
  // Another model must be the swarm's this long before this peer concludes
  // it is the misfit (model_check.cpp); a start-up wait gives that verdict
  // this long past its deadline once it suspects it.
  static constexpr int64_t kMisfitConfirmMs = 1500;
  static constexpr int64_t kMisfitVerdictGraceMs = 5000;

  void log(Level level, const std::string &message) const;
  // Logs the first time, then at most once a minute per key with how many
  // were held back: a broken peer or a misfit must not flood anyone's log.
  void log_limited(Level level, const std::string &key, const std::string &message) const;
  void detail(const std::string &message) const;  // info when verbose, else debug

  // Background thread: reads the swarm's progress, publishes this peer's.
  void background();
  void refresh();
  void publish(bool force);  // force: put now, whatever changed
  // How long the background may go without reading the swarm's records
  // (tracker.h).
  int64_t read_interval_ms() const;
  ProgressRecord own_record() const;
  SwarmView view() const;
  // The swarm's size for decisions that end a peer (min_peers, a diverged
  // peer with nobody to heal from): view().peers, or, where more, this peer
  // and the others whose records are younger than the DHT's expiry. On a
  // loaded machine records age past the live horizon: a peer whose reads
  // brought 40 records counted 4 of 64 and gave up at bootstrap (churn
  // runs 11 and 13), and a diverged one counted itself alone and exited
  // (run 14).
  size_t peers_seen() const;
  size_t peers_seen(const SwarmView &v) const;  // with the view already taken
  // The highest epoch of another live peer that is not away, checkpointers
  // included (view() leaves them out); -1 when none.
  int64_t newest_epoch() const;
  void wake_background();

  // State: serving a snapshot to others, loading one from them.
  // Whether this peer's state may be served now (it has a server; with
  // state averaging, it holds a sync point's state).
  bool servable() const;
  // Publishes a snapshot when a joiner asked for one; true when it did.
  bool serve_if_wanted();
  // At an epoch's start (after the optimizer step): a snapshot for joiners
  // before any asks, as snapshot_ahead says, so that a joiner's download
  // begins at once instead of at this peer's next step boundary.
  // Parameters and optimizer state change only at the optimizer step, so
  // the epoch's snapshot is its state until the next one.
  void serve_at_epoch_start(int64_t epoch_ms);
  // Snapshots the state into the state server (why: for the log).
  void publish_snapshot(const char *why);
  double snapshot_ms_ = -1;  // what the last snapshot and hand-over took; -1: none yet
  uint64_t ahead_skipped_ = 0;  // epochs snapshot_ahead = "auto" found it too dear
  // Readies this donor's snapshot buffers (peer.cpp): at setup, and after
  // the first optimizer step (warmed_after_step_), when the snapshot has
  // its full size.
  void warm_serving();
  bool warmed_after_step_ = false;
  bool warmed_ = false;  // warm_serving found the state small enough to keep its buffers warm
  bool load_state(int64_t min_epoch, std::string *why);
  // Catches up with a swarm at swarm_epoch (state_load.cpp): the plan
  // (plan_resync) loads the swarm's epoch, or its last sync point and then
  // follows to swarm_epoch. must_load: this peer's own parameters are not
  // the swarm's (a joiner's, a diverged peer's), so a state is loaded even
  // when this peer's epoch is past the last sync point. Returns whether
  // this peer now trains at the swarm's epoch; *why says why not.
  bool catch_up(int64_t swarm_epoch, bool must_load, std::string *why);
  void zero_grads();

  // Rounds. matchmake runs on the training thread, or on a prematch thread
  // (background: it then leaves snapshots to the training thread and stops
  // early when *cancel is set).
  std::optional<GroupRecord> matchmake(int64_t epoch, uint32_t attempt, Clock::time_point round_deadline,
                                       const std::atomic<bool> *cancel = nullptr);
  // Starts matchmaking for this epoch on a helper thread once the swarm is
  // expected to reach the target within matchmaking_time (hivemind's
  // pre-scheduling), so that reaching it costs only the allreduce.
  void maybe_prematch(const SwarmView &v);
  void run_prematch(struct Prematch *p);
  // The group's communicator: the kept one where the group asks for it
  // (kept_comm.h), else a new one; null with *why when neither came.
  std::unique_ptr<GroupComm> group_comm(const GroupRecord &group, Clock::time_point deadline,
                                        const std::atomic<bool> *cancel, std::string *why);
  void drop_prematch();  // cancels and joins it
  // The target is reached: average (or step alone) and decide.
  loom_status finish_window(loom_step_decision *decision);
  // delay_averaging (delayed_round.cpp). launch_delayed: buffer_ holds this
  // member's contribution; the round's data moves on a helper thread.
  // apply_delayed: joins it and, when it succeeded, puts its mean in the
  // gradients for this window's step (the next epoch's gradients so far
  // wait in carry_ and come back at the next window); false when there was
  // nothing to apply. drop_delayed: joins and forgets it.
  RoundEnd launch_delayed(const GroupRecord &group, std::unique_ptr<GroupComm> comm, const MemberWeights &members,
                          double total, bool sliced, Clock::duration waited, bool ahead,
                          Clock::time_point deadline);
  void run_delayed(DelayedRound *d, Clock::time_point deadline);
  bool apply_delayed(loom_step_decision *decision);
  void drop_delayed();
  void add_carry();
  // Local updates (local_updates.cpp, outer_step.h). close_window: the
  // epoch's round, finish_window's or local_round's. local_round averages
  // the pseudo-gradient (anchor minus parameters) and takes the outer step;
  // the window's own gradients then make an inner step. inner_step: this
  // window steps the host's optimizer on its own gradients (none once the
  // swarm's last epoch is reached).
  loom_status close_window(loom_step_decision *decision);
  loom_status local_round(loom_step_decision *decision);
  loom_status inner_step(loom_step_decision *decision);
  // Under local updates, a peer behind the swarm's epoch loads its state
  // (anchor and momentum with it); when none can be loaded, it takes the
  // swarm's epoch with its own parameters as the anchor. True when it
  // loaded (the gradients were then dropped).
  bool catch_up_local(int64_t global_epoch);
  // After an averaged round, over comm_: whether every member holds the
  // same outer state (one tiny allreduce of its digest); where not (a member
  // stepped alone, or went on from its own parameters), the members take
  // its mean first, so that the group's step leaves them agreeing again.
  // False, with *why, when the collective failed.
  // *differed: the members held different outer states and took their mean.
  bool agree_on_outer_state(Clock::time_point deadline, std::string *why, bool *differed);
  void set_parameters_to_anchor();
  // The host's snapshot and restore; under local updates the outer state
  // rides after the host's bytes (outer_step.h), and a restore takes it.
  loom_status snapshot_state(const uint8_t **data, size_t *len);
  loom_status restore_state(const uint8_t *data, size_t len);
  // Whether the round ahead is short of its target: never under local_steps.
  uint64_t round_target(const GroupRecord &group) const;
  // The first attempt at or after `from` whose group has not closed yet.
  uint32_t first_open_attempt(int64_t epoch, uint32_t from);
  // Averages the gradients, weighted by samples, over a group (see RoundEnd).
  // weight: this peer's samples, 0 when it must not contribute; norm: of its
  // mean gradient (not finite when the gradients are not).
  RoundEnd average_gradients(double weight, double norm);
  // top_up = "grants" (grant_round.cpp): the hub a group's members ask
  // (none: the group has none); the asker (none without a hub); the next
  // grant (false: meet); an ask sent ahead near a grant's end.
  std::optional<GrantHub> grant_hub(const GroupRecord &group, const GroupComm &comm) const;
  std::optional<TopUpGrants> grant_asker(const GroupRecord &group, const GroupComm &comm, double deficit,
                                         uint64_t batch, double share) const;
  bool ask_grant(TopUpGrants &g, uint64_t *until_samples);
  void ask_ahead(TopUpGrants &g, uint64_t until_samples);
  // Every member's weight and norm, exchanged over comm before any data
  // moves; false (with *why) when the allreduce failed.
  bool exchange_weights(GroupComm &comm, double weight, double norm, Clock::time_point deadline, MemberWeights *out,
                        std::string *why, double factor = kOutlierFactor);
  void average_parameters(const char *why);
  // Replaces each view's data by the mean over comm_'s members weighted by
  // members.weight (aggregation mean), or by their CenteredClip
  // (centered_clip); false, with *why, when the collective failed (the
  // data is then unchanged).
  // relayed: what client-mode peers sent through this one (their weighted
  // sum, relayed_weight its weight: members.weight counts it already), or null.
  // codec: how the values travel (compression.h). reference: under a
  // codec, values every member holds alike (its first numel_ values), sent
  // as each member's difference from them.
  bool average_views(std::vector<FloatView> &views, const MemberWeights &members, Clock::time_point deadline,
                     Codec codec, std::string *why, const std::vector<float> *relayed = nullptr, double relayed_weight = 0,
                     const float *reference = nullptr);
  // *same: whether every member of comm_ holds the same synced_ (by its
  // digest), by a tiny allreduce every member must make. False, with *why,
  // when the collective failed.
  bool same_reference(Clock::time_point deadline, bool *same, std::string *why);
  // A group's average slice by slice (sliced_round.cpp): out (numel values)
  // gets the CenteredClip (aggregation = centered_clip, robust.h) or the
  // weighted mean of every member's values, weighted by weights (per rank; 0
  // leaves a member out), the values travelling in codec (compression.h).
  // Each member owns a slice: an alltoall brings it every member's copy of
  // its slice, and an allgather brings every member the results. out may be
  // values. False, with *why, when the collective failed.
  // The members' copies of this peer's slice or part combined into out (len
  // values): CenteredClip under aggregation = centered_clip, else the
  // weighted mean; `what` names the piece in the clipping message.
  void combine_copies(const std::vector<const float *> &copies, const std::vector<double> &weights, uint64_t len,
                      float *out, const char *what);
  bool sliced_average(GroupComm &comm, const float *values, uint64_t numel, const std::vector<double> &weights,
                      float *out, Codec codec, Clock::time_point deadline, std::string *why);
  // The same mean in f32 by point-to-point blocks (balanced_round.cpp),
  // each member owning a part sized by the members' measured link rates
  // (members.rate, bandwidth.h); times its blocks to update link_rate_.
  bool balanced_average(GroupComm &comm, const float *values, uint64_t numel, const MemberWeights &members,
                        float *out, Clock::time_point deadline, std::string *why);
  // Adds views of the host's float32 buffers (ABI 1.4) to *views; returns
  // how many.
  size_t append_buffer_views(std::vector<FloatView> *views);
  // Local updates: the group's mean of the model's buffers (BatchNorm
  // statistics) after an averaged round, each member with finite ones
  // counting 1 (no state averaging runs to carry them).
  void average_buffers(int64_t epoch);
  // The parameters as they were when this peer last synced with the swarm
  // (averaged them, or loaded the state), and how far they moved since: the
  // drift state averaging compares (health.h).
  void mark_synced();
  // No other peer seen over the DHT's expiry, nor a record held younger than
  // kAloneMs (under load all can be older than the expiry: 64-peer run 25).
  bool alone_for_good() const;
  static constexpr int64_t kAloneMs = 60 * 1000;
  // Sync points (sync_state.cpp): at every state-averaging epoch (and the
  // last) a peer records its parameters' digest (and those of its buffers,
  // and of the optimizer's statistics when they are averaged too) in its
  // progress record, and serves joiners only the state of such an epoch, so
  // that a joiner can check what it loaded against what most peers
  // published (a poisoned donor's state does not match).
  bool is_sync_epoch(int64_t epoch) const;
  uint64_t state_digest();
  void record_sync(int64_t epoch);
  // After a donor's state was restored: whether to keep it (state_check.h),
  // waiting for the others' records of that epoch up to deadline; *digest
  // gets the restored parameters' digest.
  Verdict check_loaded(int64_t epoch, uint64_t donor, Clock::time_point deadline, uint64_t *digest,
                       std::string *why);
  double drift_since_sync() const;
  // With average_optimizer_state: the optimizer's statistics, over comm_.
  void average_optimizer_state(const char *why, const MemberWeights &members, Clock::time_point deadline);

  // Health: a peer that saw a non-finite loss or gradient since it last
  // loaded the swarm's state contributes nothing and reloads the state.
  void mark_unhealthy(const std::string &why);
  void heal();
  bool views_finite(const std::vector<FloatView> &views) const;
  bool state_finite();  // parameters and buffers

  // One model per swarm (fingerprint.h). Background thread: publishes this
  // peer's description and decides whether this peer is the odd one out.
  void publish_fingerprint();
  void check_model(const std::vector<ProgressRecord> &foreign);
  bool misfit(std::string *why) const;
  // The host asked this process to stop (loom_host_v1.stop_requested, ABI
  // 1.9): no new round starts, waits for a group end, and rounds whose
  // group already counts on this peer are finished.
  bool stopping() const;
  std::string misfit_text(const std::string &difference) const;
  // Setup, before this peer's DHT node starts: false with *why when an
  // initial peer's state server says the swarm trains another model, or
  // refuses this peer over the swarm key (none, another, or one too many)
  // and no initial peer answered.
  bool preflight_model(std::string *why);
  std::string key_mismatch_text(const std::string &peer, KeyRefusal refusal) const;
  // Background thread: what this peer's state server tells a peer about to
  // join (the model, once this peer is sure it is the swarm's).
  void serve_model();
  // This peer's model as a record (its text cut to kMaxFingerprintText).
  FingerprintRecord fingerprint_record(uint32_t peers) const;

  std::string join_hint() const;

  // Relaying (relay_round.cpp, relay.h). A full peer: each client-mode
  // peer's contribution waits in relay_inbox_ (on its session thread, in
  // relay_contribution) until this peer's round takes it (take_relayed:
  // added into relayed_sum_ before the group exchanges weights) and answers
  // it (answer_relayed, with the group's mean or a miss): a RelayEntry.
  void relay_contribution(const std::string &client, RelayMessage &m, const std::function<bool()> &stop);
  double take_relayed(int64_t epoch, double own_norm);  // the relayed weight taken so far this round
  // resync (local updates): the group took the mean of differing outer
  // states, so the clients load the state rather than step from their own.
  void answer_relayed(RoundEnd end, bool resync = false);
  // State averaging (kind parameters): the contributions of the clients
  // this peer averaged gradients for this epoch, waited for a moment, taken
  // into *sum (their weighted parameters and buffers) and answered with
  // the group's mean (or a miss, with averaged false).
  // drift: this peer's own since it last synced (drift_since_sync).
  double take_relayed_parameters(int64_t epoch, double drift, std::vector<float> *sum);
  void answer_relayed_parameters(const std::vector<FloatView> &views, bool averaged);
  std::vector<std::shared_ptr<RelayEntry>> relay_params_taken_;  // training thread
  std::vector<uint64_t> relay_served_;  // clients answered averaged gradients this epoch (training thread)
  uint64_t state_numel_ = 0;  // parameters and buffers: what a parameters contribution holds
  // A client at a sync point: its parameters (and buffers) averaged with its
  // relay's group; false when that failed.
  bool relay_parameters(int64_t epoch);
  std::mutex relay_mutex_;
  std::condition_variable relay_cv_;
  std::vector<std::shared_ptr<RelayEntry>> relay_inbox_;  // guarded by relay_mutex_
  std::vector<std::shared_ptr<RelayEntry>> relay_taken_;  // training thread
  std::vector<float> relayed_sum_, relay_send_;          // training thread
  double relayed_weight_ = 0;                            // training thread
  double relay_total_ = 0;  // the last averaged round's summed weights, for the clients' results
  // Clients this peer relayed for (peer id -> the last epoch): a round waits
  // a moment for those that train at its epoch (take_relayed).
  std::map<uint64_t, int64_t> relay_clients_;  // training thread
  std::vector<uint64_t> relay_arrived_;  // clients heard from since take_relayed last looked; under relay_mutex_
  // The last averaged round's mean while clients are connected: a
  // contribution that comes after its round gets that mean (its samples did
  // not count, but its parameters stay the swarm's). Under relay_mutex_.
  int64_t relay_last_epoch_ = -1;
  double relay_last_total_ = 0;
  std::shared_ptr<const std::vector<float>> relay_last_mean_;
  bool relay_last_resync_ = false;  // that round's clients take its outer state (answer_relayed's resync)
  uint64_t relay_last_steps_ = 0;   // and its outer step count
  // A client-mode peer: its round through its relay; false with *why when
  // no full peer took it.
  RoundEnd relay_gradients(double weight, double norm);
  bool open_relay(Clock::time_point deadline, std::string *why);
  std::unique_ptr<RelayLink> relay_link_;
  uint64_t relay_peer_ = 0;
  // A round since the last sync point did not average: the parameters may
  // have drifted from the swarm's, and a client takes no part in state
  // averaging, so it loads the state at the next sync point. Under local
  // updates: its outer step was its own or its outer state no longer
  // matches (resync), so it loads after its next outer step. Cleared only
  // by a load that succeeded.
  bool client_missed_ = false;
  int64_t client_jump_to_ = 0;  // a miss: the epoch its relay was at; a resync: the next one
  // role = "checkpointer" (peer_checkpointer.cpp): each host window waits
  // up to a second for the swarm to move checkpoint_every epochs on, then
  // loads its state and keeps it on disk.
  loom_status checkpointer_window();
  void keep_checkpoint();
  int64_t kept_epoch_ = -1;  // the epoch of the last checkpoint written (-1: none)
  // Background thread: compares the address this peer announces with the
  // one the DHT nodes it talked to saw its packets come from, and warns
  // when they differ (behind NAT: nobody can connect to what it announces).
  void check_announced_address();
  // Setup, once joined: asks an initial peer to connect back to this one
  // (dial_back.h). When it cannot, nobody can: this peer is behind NAT or a
  // firewall that drops inbound, and it runs in client mode (said in a
  // warning) instead of stalling every group it would join.
  void check_reachable();
  int64_t last_address_check_ms_ = 0;
  std::string address_verdict_;  // the last one logged (background thread only)

  const loom_host_v1 *host_;
  Options opt_;
  const loom_collective_v1 *collective_;
  loom_collective_ctx *collective_instance_;
  Identity identity_;  // this process's key pair: it signs every record this peer publishes
  uint64_t id_ = 0;    // identity_.id()
  uint64_t run_ = 0;
  LogFn logfn_;

  loom_training_state_v1 state_{};
  std::vector<FloatView> params_, grads_;
  uint64_t numel_ = 0;
  // The host's gradients as one vector (the host keeps them in one flat
  // buffer), when the collective offers allreduce_scaled: a round then
  // writes the average straight into them; otherwise null (sum in buffer_,
  // then divide into the gradients).
  float *flat_grads_ = nullptr;
  int64_t max_steps_ = -1;

  std::unique_ptr<SwarmDht> dht_;
  std::unique_ptr<StateServer> server_;
  std::string announce_host_;
  uint16_t port_ = 0;

  // Shared with the background thread.
  std::atomic<int64_t> epoch_{0};
  // record_sync: the last sync point's epoch and digest, set and read as a
  // pair (the background thread publishes them) under sync_mutex_, and the
  // ones before it (newest first, ProgressRecord::kMaxEarlierSyncs).
  mutable std::mutex sync_mutex_;
  int64_t sync_epoch_ = 0;
  uint64_t sync_hash_ = 0;
  std::vector<ProgressRecord::SyncPoint> earlier_syncs_;
  void set_sync(int64_t epoch, uint64_t hash);
  bool at_sync_ = false;  // training thread: the state is that of a sync point (nothing trained since)
  // Copies the host's state into *out (reusing huge pages); false when the
  // host could not snapshot.
  bool copy_own_state(Bytes *out);
  std::atomic<uint64_t> samples_{0};
  std::atomic<double> rate_{0};
  TrainingRate training_rate_{3.0};  // rate_ over the last few seconds trained (training thread)
  EpochTrainingTime trained_;  // this epoch's seconds trained (training thread)
  std::atomic<uint32_t> flags_{0};
  std::atomic<int64_t> epoch_start_ms_{0};  // wall clock when this peer entered its epoch
  TrainingActivity activity_;  // quiet_peer.h
  int64_t quiet_said_ms_ = 0;  // background thread only
  // From the background thread: a peer at one epoch for report_quiet_after
  // or more says so, with what its training thread does and what it reads
  // of the swarm, and again every report_quiet_after.
  void say_if_quiet(int64_t now_ms, int64_t last_read_ms);
  mutable std::mutex mutex_;  // guards tracker_ and the wake-up
  Tracker tracker_{kRecordLiveMs};
  // Sampled progress (progress_shards.h). shards_ and written_levels_:
  // the background thread's (and teardown's, once it has ended).
  std::optional<ShardPlan> shards_;
  std::vector<int> written_levels_;        // levels this peer's record was last put on
  int logged_level_ = 0;                   // the level last said in the log
  uint64_t progress_reads_ = 0, records_read_ = 0;  // refresh()'s gets and the values they brought (for the log)
  std::optional<SampledProgress> sample_;  // the latest read's, when it read some shards only; under mutex_
  std::atomic<double> swarm_estimate_{1};  // the swarm's size as the latest read estimated it
  // What one progress key held: merged into the tracker as refresh() always
  // has, when ids is given (a probe of another level only counts); returns
  // how many records of other peers it held that the DHT still keeps (not
  // goodbyes, within kRecordTtlMs: the swarm's size), and *ids gets the
  // live ones' peers (kRecordLiveMs: the sample).
  // pulled: the values came from a peer's progress table, where copies older
  // than what this peer holds are the usual case, not worth a log line.
  uint64_t take_progress(const std::vector<Bytes> &values, std::vector<uint64_t> *ids, bool pulled = false);
  PeerReads reads_;  // progress from peers (progress_push.h); background thread only
  VerifiedProgress verified_;  // the records read, each checked once (background thread only)
  std::shared_ptr<ProgressPush> push_;  // progress_push.h; shared with the server's handler
  std::shared_ptr<OobHub> hub_;         // oob_hub.h: the groups this peer leads; shared with the server's handler
  Bytes own_push_;                      // this peer's newest record as its pulls push it
  std::atomic<uint64_t> tables_{0};     // peers' tables read (a joiner's catch-up waits for one)
  void share_progress(int64_t now_ms);  // the others' records, for the server's readers
  void take_pushed();                   // merges what readers pushed since last time
  using Mate = std::tuple<uint64_t, std::string, uint16_t>;  // a peer's id and state server
  // A short round's or a formed group's members, who may wait for this peer.
  std::vector<Mate> waiting_mates() const;
  size_t push_record(const Bytes &wrapped, const Mate &to);  // 1 if it took the push
  void push_goodbye(const Bytes &bye, const std::vector<Mate> &mates);  // to those mates, first
  void push_goodbye(const Bytes &bye);  // to a few live full peers, with a pull each
  // The records a live full peer holds of key (level, shard), asked of a
  // random one that writes there; nullopt when none is known or it failed.
  // nobody (may be null): set when no peer writing to the key was known to ask.
  std::optional<std::vector<Bytes>> pull_progress(int level, uint32_t shard, bool *nobody = nullptr);
  // How long a key may go between DHT reads when peers' tables are read
  // in between: the swarm's DHT reads together about kDhtReadsPerSecond.
  int64_t dht_read_interval_ms() const;
  // Whether reads between DHT reads ask peers now (progress_source).
  bool progress_from_peers_now() const;
  std::condition_variable wake_;
  bool wake_now_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  int64_t last_published_epoch_ = -1;
  uint64_t last_published_samples_ = 0;
  uint32_t last_published_flags_ = 0;
  int64_t last_published_sync_epoch_ = -1;
  int64_t last_publish_ms_ = 0;
  int64_t dht_copy_epoch_ = -1;  // the epoch of the record last put in the DHT
  std::map<std::string, int> rejected_;  // reasons already logged (background thread only)
  std::map<uint64_t, SeenAddress> addresses_;  // peers seen, to introduce to the DHT (background thread only)
  int64_t last_introduce_ms_ = 0;

  // Training thread only.
  uint64_t windows_ = 0;
  Clock::time_point window_start_{};  // when the current window's compute began
  bool window_started_ = false;
  std::unique_ptr<GroupComm> comm_;  // the last round's group, until after_optimizer_step
  KeptComm kept_;  // ... and after it, for the next round (either thread)
  // The last averaged round's timeline, for its verbose "round" line: when
  // its group met (every member's weight known, so nothing after it waits
  // on a slower partner) and when the averaged gradients went to the host.
  std::optional<Clock::time_point> round_met_;
  Clock::time_point round_averaged_{};
  std::unique_ptr<Prematch> prematch_;
  // Huge pages: the collective reads and writes them across processes.
  std::vector<float, loom_plugin_common::HugePageAllocator<float>> buffer_, scratch_;
  int64_t last_resync_try_ms_ = 0;
  // How long the swarm's epochs take, as seen (background thread): the time
  // between rises of the highest epoch in view, smoothed. A catch-up plans
  // by it (plan_resync); the rate alone (target over samples a second) left
  // out matchmaking and rounds, 3 s against 35 s at 64 peers on 2 cores.
  int64_t seen_epoch_ = -1, seen_epoch_ms_ = 0;
  std::atomic<double> swarm_epoch_ms_{0};
  void observe_swarm_epoch(int64_t now_ms);
  std::string last_local_reason_;  // why the last epoch stepped alone, if it did
  std::unique_ptr<Pending> pending_;
  std::vector<float, loom_plugin_common::HugePageAllocator<float>> zeros_;  // what a member counting 0 sends
  // sliced_average's buffers: the encoded slices this member sends and
  // receives, its slice's decoded copies and their combination.
  std::vector<uint8_t, loom_plugin_common::HugePageAllocator<uint8_t>> slice_send_, slice_recv_;
  std::vector<float> slice_copies_, slice_mean_;
  // balanced_average's: every member's copy of this member's part, and this
  // peer's link rate as its blocks showed it (sent with its weight).
  std::vector<float> balance_copies_, balance_result_;
  LinkRate link_rate_;
  int64_t last_heal_try_ms_ = 0;
  void note_loss();  // training thread: adds the host's loss of this window (ABI 1.10) to report_
  ObserverReport report_;
  bool alone_until_target_ = false;  // an early round found nobody: this epoch waits for a whole target
  int64_t alone_since_ms_ = 0;       // when it began (a round is tried again from time to time)
  // Local updates (training thread): the outer state, the boundary window's
  // own gradients while the pseudo-gradient is averaged in their place,
  // the host snapshot with the outer state after it, whether this window's
  // optimizer step follows an outer step (the epoch ends with it), and the
  // local steps taken this epoch.
  std::unique_ptr<DelayedRound> delayed_;
  std::vector<float> carry_;       // the next epoch's gradients while a delayed round's mean is applied
  bool applying_delayed_ = false;  // this window's step applies a delayed round (after_optimizer_step)
  OuterState outer_;
  std::vector<float> stash_;
  Bytes snapshot_with_outer_;
  bool outer_stepped_ = false;
  uint64_t inner_steps_ = 0;
  bool set_up_ = false;

  // Health (set on the training thread, read by the background's records).
  std::atomic<bool> unhealthy_{false};
  std::vector<float> synced_;  // see mark_synced
  int64_t synced_epoch_ = 0;   // epoch_ at mark_synced
  // A digest of synced_, kept under a lossy state_compression: a group whose
  // members all hold the same last synced parameters averages their drift
  // from them, so the codec rounds the drift, not the weights.
  uint64_t synced_digest_ = 0;

  // The fingerprint: fixed at setup.
  std::string fingerprint_text_;
  uint64_t fingerprint_ = 0;
  std::string round_space_;  // DHT namespace of this model's rounds
  int64_t since_ms_ = 0;
  // Background thread only: live peers of this run training another model.
  std::map<uint64_t, ProgressRecord> foreign_;
  int64_t misfit_seen_ms_ = 0;  // when this peer first looked like the odd one out (0: it does not)
  std::atomic<bool> suspect_misfit_{false};  // misfit_seen_ms_ != 0, for the training thread
  int64_t last_fingerprint_publish_ms_ = 0;
  int64_t last_fingerprint_try_ms_ = 0;
  mutable std::mutex misfit_mutex_;
  std::string misfit_;  // why this peer must not train in this swarm; empty while it may
  std::atomic<bool> checked_model_{false};  // the background compared models at least once with others seen
  uint32_t served_model_peers_ = UINT32_MAX;  // background: peers in the record the server has (0: none)
  mutable std::mutex limited_mutex_;
  mutable std::map<std::string, LimitedLine> limited_;
  mutable std::string status_;
};

}  // namespace loom_collab

#endif
