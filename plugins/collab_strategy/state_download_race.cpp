// SPDX-License-Identifier: Apache-2.0
// A joiner's download of the state: several donors asked at once, the first
// ready one kept (state_transfer.h's download_state).
#include <algorithm>
#include <deque>
#include <memory>
#include <thread>

#include "state_donor.h"
#include "state_wire.h"

namespace loom_collab {

using wire::Clock;
using wire::emit;

std::optional<DownloadedState> download_state(const std::vector<Donor> &donors, uint64_t run, int64_t min_epoch,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::milliseconds stall_timeout, const LogFn &log,
                                              std::string *why, const std::atomic<bool> *cancel,
                                              const std::optional<loom_key::SwarmKey> &key, size_t racing) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + timeout;
  racing = std::max<size_t>(1, racing);
  std::string summary;
  auto note = [&](const std::string &s) { summary += (summary.empty() ? "" : "; ") + s; };
  auto name_of = [](const Donor &d) {
    return "donor " + std::to_string(d.peer_id) + " (" + d.host + ":" + std::to_string(d.port) + ")";
  };
  if (donors.empty()) note("no donors");
  // Up to `racing` donors are asked at once, in the given order, and the
  // first whose reply says ok sends the state. A donor snapshots only at
  // its next step boundary, and says "not ready" after waiting for one:
  // asked one after another, each such wait added up (three donors cost a
  // charlm joiner about 6 s before its download began); asked together,
  // the joiner waits for the earliest boundary. Those that lost the race
  // are asked again if the winner fails midway.
  struct Racer {
    size_t index = 0;
    Clock::time_point started;
    std::thread thread;
    std::optional<DownloadedState> got;
    std::string reason;
    std::atomic<bool> done{false};
  };
  std::atomic<int64_t> claim{-1};
  std::atomic<bool> stop{false};
  std::deque<std::unique_ptr<Racer>> running;
  std::optional<DownloadedState> winner;
  auto start = [&](size_t i) {
    auto r = std::make_unique<Racer>();
    r->index = i;
    r->started = Clock::now();
    Racer *raw = r.get();
    raw->thread = std::thread([&, raw] {
      std::unique_ptr<StateKeys> keys;
      if (key) keys = std::make_unique<StateKeys>(*key);
      raw->got = try_donor(donors[raw->index], run, min_epoch, deadline, stall_timeout, &stop, &raw->reason, 0,
                           keys.get(), nullptr, &claim, int64_t(raw->index));
      raw->done = true;
    });
    running.push_back(std::move(r));
  };
  size_t next = 0;
  std::deque<size_t> again;  // lost a race: ready to serve if the winner fails
  std::deque<size_t> lost;
  while (!winner) {
    const bool cancelled = cancel && cancel->load();
    const bool late = Clock::now() >= deadline;
    while (!cancelled && !late && running.size() < racing && (!again.empty() || next < donors.size())) {
      if (!again.empty()) {
        start(again.front());
        again.pop_front();
      } else {
        start(next++);
      }
    }
    if (running.empty()) {
      if (cancelled && next < donors.size())
        note("cancelled before " + std::to_string(donors.size() - next) + " donor(s) were tried");
      else if (late && next < donors.size())
        note("timeout (" + std::to_string(timeout.count()) + " ms) before " + std::to_string(donors.size() - next) +
             " donor(s) were tried");
      break;
    }
    if (cancelled) stop = true;  // the racers see it at their next wait
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (auto it = running.begin(); it != running.end();) {
      Racer &r = **it;
      if (!r.done) {
        ++it;
        continue;
      }
      r.thread.join();
      const std::string name = name_of(donors[r.index]);
      if (r.got && !winner) {
        const double s = std::chrono::duration<double>(Clock::now() - r.started).count();
        emit(log, Level::info,
             "downloaded state of epoch " + std::to_string(r.got->epoch) + " (" + std::to_string(r.got->bytes.size()) +
                 " bytes) from " + name + " in " + std::to_string(int64_t(s * 1000)) + " ms");
        winner = std::move(r.got);
        stop = true;
      } else if (!winner && r.reason == kLostRace) {
        // Lost to a racer that has failed since: ready to be asked again.
        (claim.load() == -1 ? again : lost).push_back(r.index);
      } else if (!winner) {
        // One that held the claim and failed (died midway, a bad checksum)
        // frees it, and those that lost the race to it are asked again.
        emit(log, Level::warn, "state download from " + name + " failed: " + r.reason);
        note(name + ": " + r.reason);
        int64_t held = int64_t(r.index);
        if (claim.compare_exchange_strong(held, -1)) {
          again.insert(again.end(), lost.begin(), lost.end());
          lost.clear();
        }
      }
      it = running.erase(it);
    }
  }
  stop = true;
  for (auto &r : running) r->thread.join();
  if (winner) {
    if (why) why->clear();
    return winner;
  }
  if (why) *why = summary;
  return std::nullopt;
}

}  // namespace loom_collab
