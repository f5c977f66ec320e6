#include "health.h"

#include <algorithm>
#include <cmath>

namespace loom_collab {

MemberWeights member_weights(const std::vector<double> &weights, const std::vector<double> &norms) {
  MemberWeights out;
  out.weight.assign(weights.size(), 0);
  std::vector<double> counted;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] > 0 && std::isfinite(norms[i]) && norms[i] >= 0) counted.push_back(norms[i]);
  double median = 0;
  if (!counted.empty()) {
    // The lower median: with two members, the smaller norm is the reference,
    // so a diverged one cannot pull it up.
    std::nth_element(counted.begin(), counted.begin() + (counted.size() - 1) / 2, counted.end());
    median = counted[(counted.size() - 1) / 2];
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    if (!std::isfinite(norms[i]) || norms[i] < 0) continue;  // said so itself: weight 0 already, normally
    if (norms[i] > kOutlierFactor * median && norms[i] > 0) {
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

uint64_t top_up_share(uint64_t target, double total, double mine, uint64_t batch) {
  if (!(mine > 0) || !(total > 0) || double(target) <= total) return 0;
  const double share = std::ceil((double(target) - total) * mine / total);
  const uint64_t b = std::max<uint64_t>(1, batch);
  return (uint64_t(share) + b - 1) / b * b;
}

}  // namespace loom_collab
