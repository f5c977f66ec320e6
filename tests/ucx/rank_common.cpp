// SPDX-License-Identifier: Apache-2.0
// rank_common.cpp: store, plugin and data helpers of ucx_rank.
#include "rank_common.hpp"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "half.h"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"

namespace ucx_rank {

Rank::Rank(const Args& args) : args_(args) {
  store_ = loom::make_tcp_store("127.0.0.1", args.port, false, args.size, std::chrono::seconds(30));
  collective_ = open_with(args.options);
}

Rank::~Rank() {
  collective_.reset();
  hosts_.clear();
}

std::shared_ptr<loom::Collective> Rank::open_with(const std::map<std::string, std::string>& options) {
  loom::HostConfig config;
  config.search_path = loom::plugin_search_path({}, {});
  config.options[{LOOM_KIND_COLLECTIVE, "ucx"}] = options;
  loom::JobInfo job;
  job.rank = args_.rank;
  job.world_size = args_.size;
  job.local_rank = args_.rank;
  job.launcher = "none";
  hosts_.push_back(std::make_unique<loom::Host>(std::move(config), job));
  return hosts_.back()->open_collective("ucx");
}

loom::Status Rank::make_comm(const std::string& prefix, int rank, int size, std::unique_ptr<loom::Communicator>* comm,
                             int64_t timeout_ms) {
  loom::CommOptions o;
  o.rank = rank;
  o.size = size;
  o.timeout = std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : args_.timeout_ms);
  o.name = prefix;
  o.oob = store_oob(store_.get(), prefix, rank, size);
  return collective_->create_comm(o, comm);
}

loom::Status Rank::make_comm_with(const std::map<std::string, std::string>& extra, const std::string& prefix,
                                  std::unique_ptr<loom::Communicator>* comm) {
  std::map<std::string, std::string> options = extra;
  options.insert(args_.options.begin(), args_.options.end());  // keeps extra's values
  loom::CommOptions o;
  o.rank = args_.rank;
  o.size = args_.size;
  o.timeout = std::chrono::milliseconds(args_.timeout_ms);
  o.name = prefix;
  o.oob = store_oob(store_.get(), prefix, args_.rank, args_.size);
  return open_with(options)->create_comm(o, comm);  // the communicator keeps its plugin instance
}

std::unique_ptr<loom::Communicator> Rank::world() {
  std::unique_ptr<loom::Communicator> comm;
  const loom::Status s = make_comm("world", args_.rank, args_.size, &comm);
  if (!s.is_ok()) {
    report("error", "\"" + s.to_string() + "\"");
    return nullptr;
  }
  return comm;
}

std::function<loom::Status(const void*, size_t, void*, int64_t)> store_oob(loom::Store* store, const std::string& prefix,
                                                                          int rank, int size) {
  return [store, prefix, rank, size](const void* send, size_t len, void* recv, int64_t timeout_ms) -> loom::Status {
    auto bytes = static_cast<const uint8_t*>(send);
    loom::Status s = store->set(prefix + "/" + std::to_string(rank), std::vector<uint8_t>(bytes, bytes + len));
    if (!s.is_ok()) return s;
    for (int r = 0; r < size; ++r) {
      std::vector<uint8_t> value;
      s = store->get(prefix + "/" + std::to_string(r), &value, std::chrono::milliseconds(timeout_ms));
      if (!s.is_ok()) return s;
      if (value.size() != len) return loom::Status(LOOM_ERR_INVALID_ARGUMENT, "oob: lengths differ");
      std::memcpy(static_cast<uint8_t*>(recv) + size_t(r) * len, value.data(), len);
    }
    return loom::Status::ok();
  };
}

void store_value(loom_dtype dtype, void* base, size_t i, double v) {
  auto put = [&](auto x) { std::memcpy(static_cast<char*>(base) + i * sizeof x, &x, sizeof x); };
  switch (dtype) {
    case LOOM_DTYPE_F16: put(loom_ucx::float_to_f16(float(v))); break;
    case LOOM_DTYPE_BF16: put(loom_ucx::float_to_bf16(float(v))); break;
    case LOOM_DTYPE_F32: put(float(v)); break;
    case LOOM_DTYPE_F64: put(v); break;
    case LOOM_DTYPE_I8: put(int8_t(v)); break;
    case LOOM_DTYPE_U8: put(uint8_t(v)); break;
    case LOOM_DTYPE_I32: put(int32_t(v)); break;
    case LOOM_DTYPE_I64: put(int64_t(v)); break;
    default: break;
  }
}

double load_value(loom_dtype dtype, const void* base, size_t i) {
  auto get = [&](auto x) {
    std::memcpy(&x, static_cast<const char*>(base) + i * sizeof x, sizeof x);
    return x;
  };
  switch (dtype) {
    case LOOM_DTYPE_F16: return loom_ucx::f16_to_float(get(uint16_t{}));
    case LOOM_DTYPE_BF16: return loom_ucx::bf16_to_float(get(uint16_t{}));
    case LOOM_DTYPE_F32: return get(float{});
    case LOOM_DTYPE_F64: return get(double{});
    case LOOM_DTYPE_I8: return get(int8_t{});
    case LOOM_DTYPE_U8: return get(uint8_t{});
    case LOOM_DTYPE_I32: return get(int32_t{});
    case LOOM_DTYPE_I64: return double(get(int64_t{}));
    default: return -1e300;
  }
}

long rss_kib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

namespace {
int count_entries(const char* path) {
  int n = 0;
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
    closedir(d);
  }
  return n - 1;  // the directory stream's own descriptor (fd) / nothing (task)
}
}  // namespace

int open_fds() { return count_entries("/proc/self/fd"); }
int threads() { return count_entries("/proc/self/task") + 1; }

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void report(const std::string& key, const std::string& value) {
  std::printf("RESULT %s %s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

}  // namespace ucx_rank
