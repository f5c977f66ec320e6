// SPDX-License-Identifier: Apache-2.0
// The swarm's DHT keys (records.h): namespaced by run id, rounds by run id
// and fingerprint, round keys reused over kRoundBuckets buckets.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "records.h"

namespace loom_collab {

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

std::string progress_key(const std::string &run_id) { return "loom/" + run_id + "/progress"; }

uint32_t round_bucket(int64_t epoch, uint32_t attempt, uint32_t buckets) {
  // A retry (attempt + 1) lands 13 buckets away from its epoch's first try
  // (13 of 16), so a retry never shares a key with the round it replaces.
  return static_cast<uint32_t>((static_cast<uint64_t>(epoch) + 13ull * attempt) % buckets);
}

uint64_t round_value_id(uint64_t peer, int64_t epoch, uint32_t attempt) {
  const uint64_t id = mix64(peer ^ mix64(static_cast<uint64_t>(epoch) * 0x100000001b3ull + attempt));
  return id == 0 ? 1 : id;
}

std::chrono::seconds round_record_ttl(double averaging_timeout) {
  const double s = std::ceil(std::max(0.0, averaging_timeout)) + 5;
  return std::chrono::seconds(static_cast<int64_t>(std::min(600.0, std::max(10.0, s))));
}

std::string join_key(const std::string &run_id, int64_t epoch, uint32_t attempt) {
  return "loom/" + run_id + "/join/" + std::to_string(round_bucket(epoch, attempt));
}

std::string group_key(const std::string &run_id, int64_t epoch, uint32_t attempt) {
  return "loom/" + run_id + "/group/" + std::to_string(round_bucket(epoch, attempt));
}

std::string oob_key(const std::string &run_id, int64_t epoch, uint32_t attempt, uint32_t part) {
  return "loom/" + run_id + "/oob/" + std::to_string(round_bucket(epoch, attempt, kOobBuckets)) + "/" +
         std::to_string(part % kOobGroupKeys);
}

std::string fingerprint_key(const std::string &run_id, uint64_t fingerprint) {
  return "loom/" + run_id + "/fingerprint/" + hex64(fingerprint).substr(2);
}

std::string round_space(const std::string &run_id, uint64_t fingerprint) {
  return run_id + "/model-" + hex64(fingerprint).substr(2);
}

}  // namespace loom_collab
