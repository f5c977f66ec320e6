/* SPDX-License-Identifier: Apache-2.0 */
// Internal to the state download: one attempt against one donor
// (state_download.cpp), which the donors' race (state_download_race.cpp)
// runs several of at once.
#ifndef LOOM_COLLAB_STATE_DONOR_H
#define LOOM_COLLAB_STATE_DONOR_H

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "state_secret.h"
#include "state_transfer.h"

namespace loom_collab {

// Why a racing attempt stopped when another donor took the claim first.
constexpr const char *kLostRace = "another donor answered first";

// One attempt against one donor. Returns the state or sets *why.
// flags: 0 for the state, kStateFlagModel for the model record.
// claim (may be null; -1 while free): donors asked at once race for it;
// the first whose reply says ok takes it (as claimant) and sends its
// state, the others stop there with kLostRace.
std::optional<DownloadedState> try_donor(const Donor &d, uint64_t run, int64_t min_epoch,
                                         std::chrono::steady_clock::time_point deadline,
                                         std::chrono::milliseconds stall, const std::atomic<bool> *cancel,
                                         std::string *why, uint16_t flags = 0, const StateKeys *keys = nullptr,
                                         KeyRefusal *refusal = nullptr, std::atomic<int64_t> *claim = nullptr,
                                         int64_t claimant = 0);

}  // namespace loom_collab

#endif
