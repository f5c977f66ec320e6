// SPDX-License-Identifier: Apache-2.0
// What a codec of collab's compression (compression.h) costs the CPU: encode
// and decode of a charlm-sized vector (32 M floats, 128 MiB) for each codec,
// in GB/s of f32 values and as a ratio to memcpy of the same bytes measured
// in the same run. A compressed round encodes a member's vector once and
// its slice's mean once, and decodes the group's copies of its slice and
// the gathered means: about two encodes and two decodes of the vector.
//   loom_bench_compression [MILLION_VALUES] [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "compression.h"

using namespace loom_collab;
using Clock = std::chrono::steady_clock;

template <typename F>
double best_seconds(int repeats, F &&f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
  }
  return best;
}

int main(int argc, char **argv) {
  const uint64_t n = uint64_t(argc > 1 ? std::atof(argv[1]) : 32) * 1000000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  if (n == 0 || repeats <= 0) {
    std::fprintf(stderr, "usage: loom_bench_compression [MILLION_VALUES > 0] [REPEATS > 0]\n");
    return 2;
  }
  std::vector<float> values(n), back(n), copy(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0, 1e-3f);
  for (auto &x : values) x = d(gen);
  const double bytes = double(n) * 4;
  const double memcpy_s = best_seconds(repeats, [&] { std::memcpy(copy.data(), values.data(), n * 4); });
  std::printf("%llu values (%.0f MiB f32), best of %d; memcpy %.2f GB/s\n", static_cast<unsigned long long>(n),
              bytes / 1048576, repeats, bytes / memcpy_s / 1e9);
  std::printf("%-11s %9s %12s %12s %12s %12s\n", "codec", "bytes", "encode GB/s", "x memcpy", "decode GB/s",
              "x memcpy");
  for (Codec c : {Codec::none, Codec::fp16, Codec::bf16, Codec::blockwise8}) {
    std::vector<uint8_t> wire(encoded_bytes(c, n));
    const double enc = best_seconds(repeats, [&] { encode(c, values.data(), n, wire.data()); });
    const double dec = best_seconds(repeats, [&] { decode(c, wire.data(), n, back.data()); });
    std::printf("%-11s %8.3fx %12.2f %12.2f %12.2f %12.2f\n", codec_name(c), double(wire.size()) / bytes,
                bytes / enc / 1e9, memcpy_s / enc, bytes / dec / 1e9, memcpy_s / dec);
  }
  return 0;
}
