// SPDX-License-Identifier: Apache-2.0
// tasks/memory_estimate.cpp: parameter counts of the built-in models from
// their options (the formulas follow the modules in charlm.cpp, teacher.cpp
// and digits.cpp), and the check against the machine's memory.
#include "memory_estimate.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace loom::train::tasks {
namespace {

constexpr double kBytesPerParameter = 4 * 4;  // float weights, gradients, Adam's two moments

// A size option as a double, at least 1: values below 1 are refused later
// by the task itself, with a message about the option's minimum.
double size_of(const Options& options, const std::string& name) {
  return std::max(1.0, std::strtod(options.text(name).c_str(), nullptr));
}

double file_bytes(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 ? static_cast<double>(info.st_size) : 0.0;
}

std::string size_text(double bytes) {
  char text[64];
  const double gb = bytes / 1e9;
  if (gb < 1) {
    std::snprintf(text, sizeof text, "%.0f MB", bytes / 1e6);
  } else {
    std::snprintf(text, sizeof text, gb < 10 ? "%.1f GB" : gb < 1e6 ? "%.0f GB" : "%.1e GB", gb);
  }
  return text;
}

}  // namespace

MemoryEstimate estimate_charlm(const Options& options) {
  const double t = size_of(options, "context"), d = size_of(options, "d_model"), layers = size_of(options, "layers"),
               f = size_of(options, "ffn");
  const double heads = std::min(size_of(options, "heads"), d);  // more would not divide d_model: refused later
  const double vocab = 256;
  const double block = 4 * d * d + 2 * d * f + 9 * d + f;  // ln1, qkv, proj, ln2, fc1, fc2
  MemoryEstimate e;
  e.parameters = vocab * d + t * d + layers * block + 2 * d + d * vocab + vocab;
  // The text twice (read, then copied into a tensor), and one sample's
  // attention scores, masked scores and softmax per layer, kept for backward.
  e.data_bytes = 2 * file_bytes(options.text("path")) + layers * heads * t * t * 4 * 3;
  e.size_options = {"context", "d_model", "layers", "heads", "ffn"};
  return e;
}

MemoryEstimate estimate_teacher(const Options& options) {
  const double inputs = size_of(options, "inputs"), hidden = size_of(options, "hidden"),
               samples = size_of(options, "samples");
  const double teacher_hidden = 64, validation_samples = 1024;
  MemoryEstimate e;
  e.parameters = hidden * (inputs + 2) + 1;
  // Inputs, targets, noise and the teacher's hidden layer, for both data sets.
  e.data_bytes = 4 * (samples + validation_samples) * (inputs + 2 + teacher_hidden) + 4 * teacher_hidden * inputs;
  e.size_options = {"inputs", "hidden", "samples"};
  return e;
}

MemoryEstimate estimate_digits(const Options& options) {
  const double h = size_of(options, "hidden");
  MemoryEstimate e;
  e.parameters = 64 * h + h + h * h + h + h * 10 + 10;  // 64 -> h -> h -> 10
  e.size_options = {"hidden"};
  return e;
}

uint64_t machine_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

void check_memory(const Options& options, const MemoryEstimate& estimate, uint64_t machine_bytes) {
  const double needed = estimate.parameters * kBytesPerParameter + estimate.data_bytes;
  if (machine_bytes == 0 || needed <= static_cast<double>(machine_bytes)) return;
  std::string with, blamed;
  for (const auto& name : estimate.size_options) {
    with += (with.empty() ? "" : ", ") + name + " = " + options.text(name);
    if (blamed.empty() && options.is_set(name)) blamed = name;
  }
  char parameters[32];
  std::snprintf(parameters, sizeof parameters, "%.1e", estimate.parameters);
  std::string problem = "is too large for this machine: with " + with + " the task would need about " + size_text(needed) + " (" + parameters +
                        " parameters, 16 bytes each with Adam, plus data); this machine has " +
                        size_text(static_cast<double>(machine_bytes));
  throw options.invalid(blamed.empty() ? estimate.size_options.front() : blamed, problem);
}

}  // namespace loom::train::tasks
