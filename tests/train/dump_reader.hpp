// SPDX-License-Identifier: Apache-2.0
// Reads what `loom train --dump-init/--dump-final DIR` wrote: parameters (or
// the optimizer's statistics) by name as float vectors. For comparing runs in
// tests.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace loom::test {

// section: "params", "buffers", or "optimizer" for the optimizer's
// statistics; only float32 entries are read.
inline std::map<std::string, std::vector<float>> read_params(const std::string& dir, const char* section = "params") {
  std::ifstream in(dir + "/manifest.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  std::map<std::string, std::vector<float>> params;
  for (const auto& p : manifest.at(section)) {
    if (p.contains("dtype") && p["dtype"] != "Float") continue;  // counters such as num_batches_tracked
    std::ifstream bin(dir + "/" + p["file"].get<std::string>(), std::ios::binary);
    std::stringstream bytes;
    bytes << bin.rdbuf();
    std::string data = bytes.str();
    std::vector<float> values(data.size() / sizeof(float));
    std::memcpy(values.data(), data.data(), values.size() * sizeof(float));
    params[p["name"].get<std::string>()] = std::move(values);
  }
  return params;
}

// Largest |a - b| / max(|b|, 1e-3) over all parameters; infinity when the
// sets of parameters or their sizes differ.
inline double max_relative_difference(const std::map<std::string, std::vector<float>>& a,
                                      const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double worst = 0;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) return INFINITY;
    for (size_t i = 0; i < va.size(); ++i) {
      double denom = std::max(std::fabs(double(it->second[i])), 1e-3);
      worst = std::max(worst, std::fabs(double(va[i]) - double(it->second[i])) / denom);
    }
  }
  return worst;
}

// Largest ||a - b|| / ||b|| over the parameter tensors (L2 norms): the
// relative error of each tensor as a whole, which rounding differences from
// another summation order (more ranks) barely move, unlike single elements
// near zero. Infinity when the sets of parameters differ.
inline double max_tensor_relative_difference(const std::map<std::string, std::vector<float>>& a,
                                             const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double worst = 0;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) return INFINITY;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      double d = double(va[i]) - double(it->second[i]);
      diff += d * d;
      norm += double(it->second[i]) * double(it->second[i]);
    }
    worst = std::max(worst, std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12));
  }
  return worst;
}

}  // namespace loom::test
