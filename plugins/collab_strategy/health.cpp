// SPDX-License-Identifier: Apache-2.0
#include "health.h"

#include <algorithm>
#include <cmath>

namespace loom_collab {

MemberWeights member_weights(const std::vector<double> &weights, const std::vector<double> &norms, double factor) {
  MemberWeights out;
  out.weight.assign(weights.size(), 0);
  std::vector<double> counted;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] > 0 && std::isfinite(norms[i]) && norms[i] > 0) counted.push_back(norms[i]);
  // The lower median: with two members, the smaller norm is the reference,
  // so a diverged one cannot pull it up. Zero norms (a member that has not
  // moved since it loaded the state) are no reference: against 0, every
  // member that moved at all would be an outlier.
  const double median = lower_median(std::move(counted));
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    if (!std::isfinite(norms[i]) || norms[i] < 0) continue;  // said so itself: weight 0 already, normally
    if (norms[i] > factor * median && norms[i] > 0) {
      out.outliers.push_back(i);
      continue;
    }
    out.weight[i] = weights[i];
    out.total += weights[i];
  }
  return out;
}

double sum_of_squares(const float *data, uint64_t n) {
  // Four partial sums: independent chains the compiler can keep in flight.
  double s[4] = {0, 0, 0, 0};
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += double(data[i + j]) * double(data[i + j]);
  for (; i < n; ++i) s[0] += double(data[i]) * double(data[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

namespace {

bool has_rate(const std::vector<double> &rates, size_t i) {
  return i < rates.size() && rates[i] > 0 && std::isfinite(rates[i]);
}

// The median of the rates of the members in `counts` that have one; 0 if none.
double median_rate(const std::vector<double> &rates, const std::vector<bool> &counts) {
  std::vector<double> known;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] && has_rate(rates, i)) known.push_back(rates[i]);
  if (known.empty()) return 0;
  std::sort(known.begin(), known.end());
  const size_t h = known.size() / 2;
  return known.size() % 2 ? known[h] : (known[h - 1] + known[h]) / 2;
}

}  // namespace

double top_up_seconds(const std::vector<uint64_t> &shares, const std::vector<double> &rates) {
  std::vector<bool> drawing(shares.size());
  for (size_t i = 0; i < shares.size(); ++i) drawing[i] = shares[i] > 0;
  const double stand_in = median_rate(rates, drawing);
  if (!(stand_in > 0)) return 0;
  double slowest = 0;
  for (size_t i = 0; i < shares.size(); ++i)
    if (shares[i] > 0) slowest = std::max(slowest, double(shares[i]) / (has_rate(rates, i) ? rates[i] : stand_in));
  return slowest;
}

double top_up_group_speed(const std::vector<double> &weights, const std::vector<double> &box_from, double box_seconds,
                          double group_rate, double speed) {
  if (box_seconds > 0 && box_from.size() == weights.size()) {
    double brought = 0;
    for (size_t i = 0; i < weights.size(); ++i)
      if (std::isfinite(weights[i]) && std::isfinite(box_from[i])) brought += std::max(0.0, weights[i] - box_from[i]);
    if (brought > 0) return brought / box_seconds;
  }
  double best = 0;
  for (double v : {group_rate, speed})
    if (std::isfinite(v) && v > best) best = v;
  return best;
}

double top_up_box_seconds(double deficit, double speed, bool measured) {
  if (!(deficit > 0) || !(speed > 0) || !std::isfinite(speed)) return 0;
  if (deficit / speed < kTopUpBoxMinSeconds) return 0;
  return (measured ? kTopUpBoxFraction : kTopUpFirstBoxFraction) * deficit / speed;
}

double group_training_rate(const std::vector<double> &rates) {
  const double stand_in = median_rate(rates, std::vector<bool>(rates.size(), true));
  if (!(stand_in > 0)) return 0;
  double sum = 0;
  for (size_t i = 0; i < rates.size(); ++i) sum += has_rate(rates, i) ? rates[i] : stand_in;
  return sum;
}

double training_rate_share(const std::vector<double> &rates, size_t i) {
  const double sum = group_training_rate(rates);
  if (i >= rates.size()) return 0;
  if (!(sum > 0)) return 1.0 / double(rates.size());
  const double mine = has_rate(rates, i) ? rates[i] : median_rate(rates, std::vector<bool>(rates.size(), true));
  return std::min(1.0, mine / sum);
}

double lower_median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto mid = values.begin() + long((values.size() - 1) / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

double swarm_count(const std::vector<double> &counts) {
  std::vector<double> known;
  for (double c : counts)
    if (c > 0 && std::isfinite(c)) known.push_back(c);
  return lower_median(std::move(known));
}

uint64_t swarm_capped_target(uint64_t part, uint64_t target_batch_size, double members, double swarm_peers,
                             double group_rate, uint64_t batch, double total, double min_seconds) {
  if (!(members > 0) || !(swarm_peers > 0) || !(group_rate > 0) || !std::isfinite(group_rate)) return part;
  const double share = double(target_batch_size) * std::min(1.0, members / swarm_peers);
  if (4 * share >= double(part)) return part;
  if ((double(part) - total) / group_rate <= min_seconds) return part;
  const uint64_t b = std::max<uint64_t>(1, batch);
  return std::min(part, std::max<uint64_t>(b, uint64_t(std::ceil(2 * share / double(b))) * b));
}

std::vector<uint64_t> top_up_shares(uint64_t target, const std::vector<double> &weights, uint64_t batch,
                                    const std::vector<double> &rates) {
  std::vector<uint64_t> out(weights.size(), 0);
  double total = 0;
  for (double w : weights) total += w > 0 ? w : 0;
  if (!(total > 0) || double(target) <= total) return out;
  // The parts: the members' rates, a member that counts but has no rate
  // yet (its first window) taken at the median of the others'; weights when
  // no member that counts has a rate.
  std::vector<bool> counts(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) counts[i] = weights[i] > 0;
  const double stand_in = median_rate(rates, counts);
  const bool by_rate = stand_in > 0;
  auto part = [&](size_t i) { return by_rate ? (has_rate(rates, i) ? rates[i] : stand_in) : weights[i]; };
  double parts = 0;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] > 0) parts += part(i);
  const uint64_t b = std::max<uint64_t>(1, batch);
  const double deficit = double(target) - total;
  uint64_t left = uint64_t(std::ceil(deficit / double(b)));  // batches the group still needs
  std::vector<std::pair<double, size_t>> remainders;  // (fraction of a batch, member)
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    const double exact = deficit * part(i) / parts / double(b);
    const uint64_t whole = std::min<uint64_t>(left, uint64_t(std::floor(exact)));
    out[i] = whole;
    left -= whole;
    remainders.emplace_back(exact - std::floor(exact), i);
  }
  // Largest remainder first; ties to the lower rank, alike on every member.
  std::sort(remainders.begin(), remainders.end(),
            [](const auto &a, const auto &c) { return a.first != c.first ? a.first > c.first : a.second < c.second; });
  for (size_t k = 0; left > 0 && !remainders.empty(); k = (k + 1) % remainders.size(), --left) ++out[remainders[k].second];
  for (auto &n : out) n *= b;
  return out;
}

}  // namespace loom_collab
