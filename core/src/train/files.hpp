// SPDX-License-Identifier: Apache-2.0
// Writing files so that a crash never leaves a half-written one in place:
// a temporary file in the same folder, fsync, rename over the target, fsync
// of the folder. No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace loom::train {

// Replaces path with data atomically; throws Error::runtime naming the path.
void write_file_atomically(const std::string& path, const std::string& data);
// Reads a whole file; throws Error::runtime naming the path.
std::string read_file(const std::string& path);
// Creates a folder and its parents; throws Error::runtime naming it.
void make_dirs(const std::string& path);
bool file_exists(const std::string& path);
// This process's peak resident memory (VmHWM in /proc/self/status); 0 when
// unknown.
long long peak_rss_bytes();
// CPU time this process has used so far, in seconds: user time, or with
// system the kernel's time on its behalf.
double cpu_seconds(bool system);
// Deletes <path>.tmp.* files that a process killed during a write left behind.
void remove_stale_temporaries(const std::string& path);

}  // namespace loom::train
