// SPDX-License-Identifier: Apache-2.0
// A joiner's download of the state: several donors asked at once, the first
// ready one kept, and the download spread over the others that hold the
// same bytes (state_transfer.h's download_state).
#include <algorithm>
#include <deque>
#include <memory>
#include <set>
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
  std::unique_ptr<StateKeys> keys;
  if (key) keys = std::make_unique<StateKeys>(*key);
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
  // Once the winner's reply names its bytes, up to racing - 1 helpers
  // fetch chunks from the end of the same bytes from other donors (range
  // requests), while the winner streams from the start: a slow donor then
  // brings a few chunks instead of setting the pace.
  struct Helper {
    size_t index = 0;
    std::thread thread;
    std::string reason;
    bool ok = false;
    std::atomic<bool> done{false};
  };
  std::atomic<int64_t> claim{-1};
  std::atomic<bool> stop{false}, helpers_stop{false};
  std::deque<std::unique_ptr<Racer>> running;
  std::deque<std::unique_ptr<Helper>> helpers;
  Stripes stripes;  // reset, never replaced: racers hold it
  std::set<size_t> helped;                 // donors asked to help with the current stripes
  std::optional<DownloadedState> primary;  // the winner's result when spread (its bytes are the stripes')
  Clock::time_point primary_started;
  std::optional<DownloadedState> winner;
  auto start = [&](size_t i) {
    auto r = std::make_unique<Racer>();
    r->index = i;
    r->started = Clock::now();
    Racer *raw = r.get();
    raw->thread = std::thread([&, raw] {
      raw->got = try_donor(donors[raw->index], run, min_epoch, deadline, stall_timeout, &stop, &raw->reason, 0,
                           keys.get(), nullptr, &claim, int64_t(raw->index), racing > 1 ? &stripes : nullptr);
      raw->done = true;
    });
    running.push_back(std::move(r));
  };
  auto start_helper = [&](size_t i) {
    helped.insert(i);
    auto h = std::make_unique<Helper>();
    h->index = i;
    Helper *raw = h.get();
    raw->thread = std::thread([&, raw] {
      raw->ok = fetch_stripes(donors[raw->index], raw->index, run, &stripes, deadline, stall_timeout, &helpers_stop,
                              keys.get(), &raw->reason);
      raw->done = true;
    });
    helpers.push_back(std::move(h));
  };
  // Ends the current spread (its winner failed): helpers stop, a fresh one begins.
  auto drop_stripes = [&] {
    helpers_stop = true;
    for (auto &h : helpers) h->thread.join();
    helpers.clear();
    helpers_stop = false;
    helped.clear();
    primary.reset();
    stripes.reset();
  };
  // Joins the finished workers (racers or helpers) of a list, each seen by then() before it goes.
  auto reap = [](auto &list, auto then) {
    for (auto it = list.begin(); it != list.end();) {
      if (!(*it)->done) {
        ++it;
        continue;
      }
      (*it)->thread.join();
      then(**it);
      it = list.erase(it);
    }
  };
  size_t next = 0;
  std::deque<size_t> again;  // lost a race: ready to serve if the winner fails
  std::deque<size_t> lost;
  // Donors that had no state of the epoch asked for yet (each waits a while
  // for its training thread's next snapshot, then says so): while a spread
  // is underway they are asked again, a moment later, and join it once they
  // reach the epoch. In a swarm whose steps take seconds, the first donor
  // at the sync point otherwise brought every chunk alone.
  struct NotYet {
    size_t index;
    Clock::time_point after;
  };
  std::deque<NotYet> not_yet;
  constexpr auto kAskAgainAfter = std::chrono::milliseconds(200);
  auto is_not_yet = [](const std::string &reason) {
    return reason.rfind(to_string(StateStatus::behind), 0) == 0 ||
           reason.rfind(to_string(StateStatus::not_ready), 0) == 0 ||
           reason.rfind(to_string(StateStatus::busy), 0) == 0;
  };
  while (!winner) {
    const bool cancelled = cancel && cancel->load();
    const bool late = Clock::now() >= deadline;
    // During a spread, racers that lose to its winner become its helpers.
    while (!cancelled && !late && running.size() + helpers.size() < racing && (!again.empty() || next < donors.size())) {
      if (!again.empty()) {
        start(again.front());
        again.pop_front();
      } else {
        start(next++);
      }
    }
    if (cancelled) stop = helpers_stop = true;  // racers and helpers see it at their next wait
    // Helpers for the spread: donors that lost the race to its winner
    // (their reply said ok, so they hold a state of the epoch asked for).
    if (stripes.ready() && !cancelled && !late) {
      for (size_t i : lost) {
        if (running.size() + helpers.size() >= racing || !stripes.any_free()) break;
        if (i != stripes.first_donor() && !helped.count(i)) start_helper(i);
      }
      // Asked again as racers: one that now holds the epoch loses to the
      // spread's winner and helps.
      const auto now = Clock::now();
      while (!not_yet.empty() && not_yet.front().after <= now && stripes.any_free() &&
             running.size() + helpers.size() < racing) {
        start(not_yet.front().index);
        not_yet.pop_front();
      }
    }
    if (running.empty() && !primary) {
      if (cancelled && next < donors.size())
        note("cancelled before " + std::to_string(donors.size() - next) + " donor(s) were tried");
      else if (late && next < donors.size())
        note("timeout (" + std::to_string(timeout.count()) + " ms) before " + std::to_string(donors.size() - next) +
             " donor(s) were tried");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    reap(helpers, [&](Helper &h) {
      if (!h.ok && !helpers_stop)
        emit(log, Level::info, "state download: " + name_of(donors[h.index]) + " left the spread download: " + h.reason);
    });
    reap(running, [&](Racer &r) {
      const std::string name = name_of(donors[r.index]);
      if (r.got && !winner && !primary && stripes.ready() && claim.load() == int64_t(r.index)) {
        // Its stream has stopped where the helpers' chunks begin.
        // The other racers go on: those that lose to it help.
        primary = std::move(r.got);
        primary_started = r.started;
      } else if (r.got && !winner && !primary) {
        const double s = std::chrono::duration<double>(Clock::now() - r.started).count();
        emit(log, Level::info,
             "downloaded state of epoch " + std::to_string(r.got->epoch) + " (" + std::to_string(r.got->bytes.size()) +
                 " bytes) from " + name + " in " + std::to_string(int64_t(s * 1000)) + " ms");
        winner = std::move(r.got);
        stop = true;
      } else if (!winner && r.reason == kLostRace) {
        // Lost to a racer that has failed since: ready to be asked again.
        (claim.load() == -1 ? again : lost).push_back(r.index);
      } else if (!winner && is_not_yet(r.reason)) {
        // Not there yet: said as info (the swarm simply has not reached the
        // epoch), and asked again if a spread begins or is underway.
        emit(log, Level::info, "state download: " + name + " has no state of the epoch asked for yet: " + r.reason);
        note(name + ": " + r.reason);
        not_yet.push_back({r.index, Clock::now() + kAskAgainAfter});
      } else if (!winner) {
        // One that held the claim and failed (died midway, a bad checksum)
        // frees it, and those that lost the race to it are asked again.
        emit(log, Level::warn, "state download from " + name + " failed: " + r.reason);
        note(name + ": " + r.reason);
        int64_t held = int64_t(r.index);
        if (claim.compare_exchange_strong(held, -1)) {
          drop_stripes();
          again.insert(again.end(), lost.begin(), lost.end());
          lost.clear();
        }
      }
    });
    if (primary && helpers.empty()) {
      std::string bad;
      if (!stripes.complete() && !cancelled && !late && !helped.count(stripes.first_donor())) {
        // Chunks a failed helper left: the first donor brings them.
        start_helper(stripes.first_donor());
        continue;
      }
      const size_t first = stripes.first_donor();
      if (!stripes.complete()) {
        bad = "the download spread over donors ended with chunks missing";
      } else if (stripes.check(&bad)) {
        const double s = std::chrono::duration<double>(Clock::now() - primary_started).count();
        const double moving = std::chrono::duration<double>(Clock::now() - stripes.began()).count();
        std::string from;
        for (const auto &[i, n] : stripes.brought())
          from += (from.empty() ? "" : ", ") + std::to_string(n) + " from " + name_of(donors[i]);
        DownloadedState out = std::move(*primary);
        out.bytes = stripes.take_bytes();
        emit(log, Level::info,
             "downloaded state of epoch " + std::to_string(out.epoch) + " (" + std::to_string(out.bytes.size()) +
                 " bytes) from " + name_of(donors[first]) + " in " + std::to_string(int64_t(s * 1000)) +
                 " ms, " + std::to_string(int64_t(moving * 1000)) +
                 " ms of them from the first reply on (before it, " + std::to_string(stripes.fill_ms()) +
                 " ms filling the receive buffer), spread over donors (chunks: " + from + ")");
        winner = std::move(out);
        break;
      }
      emit(log, Level::warn, "state download from " + name_of(donors[first]) + " and its helpers failed: " + bad);
      note(name_of(donors[first]) + ": " + bad);
      claim = -1;
      drop_stripes();
      stop = false;
      again.insert(again.end(), lost.begin(), lost.end());
      lost.clear();
    }
  }
  stop = helpers_stop = true;
  for (auto &r : running) r->thread.join();
  for (auto &h : helpers) h->thread.join();
  if (winner) {
    if (why) why->clear();
    return winner;
  }
  if (why) *why = summary;
  return std::nullopt;
}

}  // namespace loom_collab
