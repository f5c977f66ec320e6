// SPDX-License-Identifier: Apache-2.0
#include "outer_step.h"

#include <cstring>

namespace loom_collab {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'O', 'U', 'T', '1'};
constexpr size_t kFooter = 3 * sizeof(uint64_t) + sizeof(kMagic) + sizeof(uint64_t);  // + a reserved word

void put64(uint8_t *at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = uint8_t(v >> (8 * i));
}
uint64_t get64(const uint8_t *at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(at[i]) << (8 * i);
  return v;
}

}  // namespace

void nesterov_outer_step(float *anchor, float *momentum, const float *g, uint64_t n, float lr, float mu,
                         uint64_t steps) {
  for (uint64_t i = 0; i < n; ++i) {
    const float m = steps == 0 ? g[i] : mu * momentum[i] + g[i];
    momentum[i] = m;
    anchor[i] -= lr * (g[i] + mu * m);
  }
}

void append_outer_state(const uint8_t *host, size_t host_len, const OuterState &s, std::vector<uint8_t> *out) {
  const uint64_t numel = s.anchor.size();
  const size_t floats = 2 * numel * sizeof(float);
  out->resize(host_len + floats + kFooter);
  uint8_t *at = out->data();
  if (host_len) std::memcpy(at, host, host_len);
  at += host_len;
  std::memcpy(at, s.anchor.data(), numel * sizeof(float));  // little-endian hosts only, as the host snapshot
  at += numel * sizeof(float);
  std::memcpy(at, s.momentum.data(), numel * sizeof(float));
  at += numel * sizeof(float);
  put64(at, s.steps);
  put64(at + 8, numel);
  put64(at + 16, host_len);
  put64(at + 24, 0);
  std::memcpy(at + 32, kMagic, sizeof(kMagic));
}

bool split_outer_state(const uint8_t *data, size_t len, uint64_t numel, size_t *host_len, OuterState *s,
                       std::string *why) {
  if (len < kFooter || std::memcmp(data + len - sizeof(kMagic), kMagic, sizeof(kMagic)) != 0) {
    *why = "the state holds no outer optimizer state (its donor does not train with local_updates)";
    return false;
  }
  const uint8_t *footer = data + len - kFooter;
  const uint64_t steps = get64(footer), n = get64(footer + 8), host = get64(footer + 16);
  if (n != numel) {
    *why = "the state's outer optimizer state is for " + std::to_string(n) + " parameters, this model has " +
           std::to_string(numel);
    return false;
  }
  if (n > len / (2 * sizeof(float)) || host != len - kFooter - 2 * n * sizeof(float)) {
    *why = "the state's outer optimizer state is damaged (its lengths do not add up to the " + std::to_string(len) +
           " bytes received)";
    return false;
  }
  *host_len = size_t(host);
  s->steps = steps;
  s->anchor.resize(n);
  s->momentum.resize(n);
  std::memcpy(s->anchor.data(), data + host, n * sizeof(float));
  std::memcpy(s->momentum.data(), data + host + n * sizeof(float), n * sizeof(float));
  return true;
}

}  // namespace loom_collab
