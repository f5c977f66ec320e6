// SPDX-License-Identifier: Apache-2.0
#include "bandwidth.h"

#include <algorithm>
#include <cmath>

namespace loom_collab {

double phase_rate(const std::vector<TimedBlock> &blocks) {
  double sum = 0;
  for (const auto &b : blocks)
    if (b.bytes >= kMinProbeBytes && b.seconds > 0) sum += double(b.bytes) / b.seconds;
  return sum;
}

namespace {
void keep(std::vector<double> *window, double rate) {
  if (!(rate > 0) || !std::isfinite(rate)) return;
  window->push_back(rate);
  if (window->size() > size_t(kRateWindow)) window->erase(window->begin());
}
double highest(const std::vector<double> &window) {
  return window.empty() ? 0 : *std::max_element(window.begin(), window.end());
}
}  // namespace

void LinkRate::observe(double out, double in) {
  keep(&out_, out);
  keep(&in_, in);
}

double LinkRate::value() const {
  const double out = highest(out_), in = highest(in_);
  if (out > 0 && in > 0) return std::min(out, in);
  return std::max(out, in);
}

std::vector<double> balanced_fractions(const std::vector<double> &rates) {
  const size_t n = rates.size();
  std::vector<double> f(n, n ? 1.0 / double(n) : 0.0);
  if (n < 3) return f;
  for (double c : rates)
    if (!(c > 0) || !std::isfinite(c)) return f;
  const double k = double(n - 2);
  auto sum_at = [&](double t) {
    double s = 0;
    for (double c : rates) s += std::max(0.0, (t * c - 1) / k);
    return s;
  };
  // sum_at grows with T from 0 (T = 1 / c_max) without bound: bisect.
  double lo = 1 / *std::max_element(rates.begin(), rates.end()), hi = lo;
  while (sum_at(hi) < 1) hi *= 2;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    (sum_at(mid) < 1 ? lo : hi) = mid;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += f[i] = std::max(0.0, (hi * rates[i] - 1) / k);
  for (double &x : f) x /= total;
  return f;
}

double butterfly_time(const std::vector<double> &fractions, const std::vector<double> &rates) {
  const size_t n = fractions.size();
  double worst = 0;
  for (size_t i = 0; i < n && i < rates.size(); ++i) {
    const double moved = n < 2 ? 0 : 1 + double(n - 2) * fractions[i];
    worst = std::max(worst, moved / rates[i]);
  }
  return worst;
}

bool parts_pay(const std::vector<double> &rates, int64_t epoch) {
  const size_t n = rates.size();
  if (n < 3) return false;
  for (double c : rates)
    if (!(c > 0) || !std::isfinite(c)) return true;
  if (epoch % kReprobeEvery == 0) return true;
  const std::vector<double> equal(n, 1.0 / double(n));
  return butterfly_time(balanced_fractions(rates), rates) < kPartsPayBelow * butterfly_time(equal, rates);
}

std::vector<uint64_t> part_offsets(const std::vector<double> &fractions, uint64_t numel) {
  std::vector<uint64_t> at(fractions.size() + 1, 0);
  double cumulative = 0;
  for (size_t i = 0; i < fractions.size(); ++i) {
    cumulative += fractions[i];
    at[i + 1] = std::min<uint64_t>(numel, uint64_t(std::llround(cumulative * double(numel))));
    at[i + 1] = std::max(at[i + 1], at[i]);
  }
  at.back() = numel;
  return at;
}

}  // namespace loom_collab
