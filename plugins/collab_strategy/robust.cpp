// SPDX-License-Identifier: Apache-2.0
#include "robust.h"

#include "health.h"

#include <algorithm>
#include <cmath>

namespace loom_collab {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + long(mid))) / 2;
  return m;
}

double distance(const float *x, const std::vector<double> &v) {
  double s = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    const double d = double(x[k]) - v[k];
    s += d * d;
  }
  return std::sqrt(s);
}

}  // namespace

std::vector<double> capped_weights(const std::vector<double> &w) {
  std::vector<double> positive;
  for (double x : w)
    if (x > 0) positive.push_back(x);
  // The lower median: with two members the mean of both claims would let
  // the larger one through whatever it is. At most the median, not twice
  // it: one member claiming twice the others' samples (a rogue can claim
  // anything, and topping up lets a fast one really bring more) held 2 of
  // the 5 shares of a group of four, 40% of the pull.
  const double cap = lower_median(std::move(positive));
  std::vector<double> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] > 0 ? std::min(w[i], cap) : 0.0;
  return out;
}

ClipStats centered_clip(const std::vector<const float *> &copies, const std::vector<double> &weights, uint64_t len,
                        double radius, int iterations, float *out) {
  ClipStats stats;
  std::vector<size_t> in;  // the members that count
  double total = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    // A member's norm is what it announced; its values are checked here: a
    // copy with a value that is not finite is left out.
    if (weights[i] > 0 && std::all_of(copies[i], copies[i] + len, [](float x) { return std::isfinite(x); })) {
      in.push_back(i);
      total += weights[i];
    }
  }
  if (in.empty() || len == 0) {
    std::fill(out, out + len, 0.0f);
    return stats;
  }
  // The coordinate-wise median: robust on its own (a minority cannot move
  // it past the honest values' range), the start that CenteredClip refines.
  std::vector<double> v(len);
  std::vector<double> column(in.size());
  for (uint64_t k = 0; k < len; ++k) {
    for (size_t j = 0; j < in.size(); ++j) column[j] = copies[in[j]][k];
    v[k] = median_of(column);
  }
  std::vector<double> dist(in.size());
  for (size_t j = 0; j < in.size(); ++j) dist[j] = distance(copies[in[j]], v);
  const double tau = radius * median_of(dist);
  if (!(tau > 0) || !std::isfinite(tau)) {
    // Most members agree exactly (or the distances are not finite): the
    // median is the answer.
    for (uint64_t k = 0; k < len; ++k) out[k] = float(v[k]);
    return stats;
  }
  std::vector<double> step(len);
  for (int it = 0; it < iterations; ++it) {
    std::fill(step.begin(), step.end(), 0.0);
    stats.clipped = 0;
    for (size_t j = 0; j < in.size(); ++j) {
      const float *x = copies[in[j]];
      const double d = it == 0 ? dist[j] : distance(x, v);
      double scale = weights[in[j]] / total;
      if (d > tau) {
        scale *= tau / d;
        ++stats.clipped;
      }
      for (uint64_t k = 0; k < len; ++k) step[k] += scale * (double(x[k]) - v[k]);
    }
    for (uint64_t k = 0; k < len; ++k) v[k] += step[k];
  }
  for (uint64_t k = 0; k < len; ++k) out[k] = float(v[k]);
  return stats;
}

}  // namespace loom_collab
