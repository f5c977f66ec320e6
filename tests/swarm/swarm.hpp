// SPDX-License-Identifier: Apache-2.0
// Helpers for the swarm tests: collab peers as real `loom train` processes
// on loopback, each with its own output folder and log file under one
// scratch folder, and readers for what the peers log and dump.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/subprocess.hpp"

namespace loom::swarm {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A fresh folder under $TMPDIR (or /tmp); removed at destruction unless the
// test failed, so the peers' logs stay for a look.
class Scratch {
 public:
  Scratch();
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// A run_id no other test run on this machine uses: tag plus this process's id.
std::string unique_run_id(const std::string& tag);

std::string digits_config();  // examples/configs/digits-collab.toml
std::string teacher_config();  // examples/configs/teacher.toml
std::string read_text(const std::string& path);  // a file's bytes; empty when it cannot be read

// sets plus the rogue test task in mode slow: digits, every loss delay_ms
// late (a peer whose steps take real time; digits alone runs a whole short
// test in about a second).
std::vector<std::string> slowed(std::vector<std::string> sets, int delay_ms);

// One `loom train` peer. Its stdout and stderr go to <scratch>/<name>.log,
// its output_dir is <scratch>/<name>, and with dump_final its final
// parameters go to <scratch>/<name>-final. The destructor SIGKILLs it.
class Peer {
 public:
  // sets: "section.key=value" overrides, after trainer.threads=1; env: added to the environment (an
  // empty value unsets the variable; LOOM_INITIAL_PEERS is unset unless given).
  Peer(const Scratch& scratch, const std::string& name, const std::string& config, const std::vector<std::string>& sets,
       std::map<std::string, std::string> env = {}, bool dump_final = true);

  std::string log() const;  // everything logged so far
  const std::string& name() const { return name_; }
  const std::string& output_dir() const { return output_dir_; }
  const std::string& final_dir() const { return final_dir_; }
  Clock::time_point started() const { return started_; }
  int pid() const { return child_->pid(); }
  bool running() { return child_->running(); }
  void kill();  // SIGKILL, then reap
  void signal(int signo);  // e.g. SIGSTOP / SIGCONT; no reaping
  // The exit code; -1 if it did not exit within timeout (it is then killed),
  // 128 + n if signal n ended it.
  int wait_exit(milliseconds timeout);
  // "127.0.0.1:PORT" from "listening on ..." in the log; empty until logged.
  std::string address() const;
  std::string tail(size_t lines = 40) const;  // the end of the log, for failure messages

 private:
  std::string name_, log_path_, output_dir_, final_dir_;
  Clock::time_point started_;
  std::unique_ptr<loom::test::Child> child_;
};

// A peer's state server, "127.0.0.1:PORT": the DHT port unless the peer
// logged another one for state.
std::string state_address(const Peer& p);

// The misbehaving member (tests/collab/rogue_peer.cpp), next to loom.
std::string rogue_binary();
// The DHT address a loom_swarm_rogue logging to log_path prints ("rogue dht
// HOST:PORT") once it listens; empty if it did not within timeout.
std::string rogue_dht_address(const std::string& log_path, milliseconds timeout);
// The peer id a loom_swarm_rogue prints ("rogue peer ID") before its DHT
// address; empty if its log has none.
std::string rogue_peer_id(const std::string& log_path);
// A peer's own id, from "peer ID of run 'R' listening on ..." in its log
// text; empty until it listens.
std::string own_peer_id(const std::string& log);
// Waits up to 30 s for each peer's own id, then sorts them by it, smallest
// first (the smallest id that joins a round leads it, matchmaking.cpp).
// Returns the first peer that never logged its id, null when all did.
Peer* sort_by_peer_id(std::vector<std::unique_ptr<Peer>>& peers);

// n peers of config with the same sets, named prefix0, prefix1...: the first
// starts the swarm, the others join through it. Fewer than n come back (the
// first alone) when it never listened within 30 s: check the size, and its
// tail.
std::vector<std::unique_ptr<Peer>> start_swarm(const Scratch& scratch, int n, const std::string& config,
                                               const std::vector<std::string>& sets, const std::string& prefix = "p",
                                               bool dump_final = true);
// n digits peers of sets (start_swarm, named prefix0...), each waited for up
// to 180 s and expected to have run `steps` steps: their mean final
// accuracy, the largest parameter difference from the first, and each one's
// log. accuracy -1, with the failure added, when one did not finish.
struct DigitsRun {
  double accuracy = -1;
  double difference = -1;
  std::vector<std::string> logs;
};
DigitsRun run_digits_swarm(const Scratch& scratch, int n, const std::vector<std::string>& sets,
                           const std::string& prefix, int64_t steps);
// n teacher peers (no final dump), p0, p1...: start_swarm's.
std::vector<std::unique_ptr<Peer>> start_teacher_swarm(const Scratch& scratch, int n, const std::vector<std::string>& sets);
// The sets of a verbose 30-step teacher swarm of `peers` on loopback that
// waits for all of them and averages `target` samples a round, on a run id
// of its own (tag): what the round and progress tests share.
std::vector<std::string> teacher_round_sets(const std::string& tag, int peers, int64_t target);

// Checks pred every poll until it holds (true) or timeout passes (false).
bool wait_until(const std::function<bool()>& pred, milliseconds timeout, milliseconds poll = milliseconds(20));

// How many times what occurs in text (overlapping occurrences too).
size_t count_of(const std::string& text, const std::string& what);

// What a peer logs with strategy.options.verbose = true.
struct Averaged {
  int64_t epoch = 0;
  int64_t samples = 0;
  int peers = 0;
  bool ahead = false;  // the group formed before the peer reached the target
};
std::vector<Averaged> averaged_rounds(const std::string& log);  // "epoch E: averaged gradients of S samples with N peers"
// The epochs the peer saw finished: averaged, stepped on its local gradients
// ("epoch E: ... proceeding"), or finished by the others ("the swarm finished
// epoch E without this peer").
std::vector<int64_t> finished_epochs(const std::string& log);
int64_t last_finished_epoch(const std::string& log);  // -1 when none
struct Loaded {
  int64_t epoch = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};
std::vector<Loaded> loaded_states(const std::string& log);  // "loaded the state of epoch E from peer P (B bytes in T s)"
struct Final {
  double accuracy = 0;
  int64_t steps = 0;
};
std::optional<Final> final_result(const std::string& log);  // "final accuracy: X after N steps"

// From a peer's teardown: the communicators it built, how many exchanged
// their addresses through the group's hub (oob_hub.h) and through the DHT,
// how many exchanges failed, and the parts its own hub took; all -1 when
// the line is missing.
struct CommunicatorsBuilt {
  int64_t total = -1, hub = -1, dht = -1, failed = -1, hub_parts = -1;
};
CommunicatorsBuilt communicators_built(const std::string& log);

// Largest |a - b| over the parameters (section "optimizer": the optimizer's
// statistics) two --dump-final folders hold; infinity when the sets differ,
// are empty, or a folder cannot be read.
double max_parameter_difference(const std::string& dir_a, const std::string& dir_b, const char* section = "params");

// (step, value) of one metric in a peer's metrics.csv.
std::map<int64_t, double> read_metric(const std::string& output_dir, const std::string& metric);

// A loopback port where nothing listens (UDP and TCP), picked by the kernel.
int unused_port();

}  // namespace loom::swarm
