// SPDX-License-Identifier: Apache-2.0
#include "files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/status.hpp"

namespace loom::train {
namespace {

std::string why() { return std::strerror(errno); }

void fsync_path(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error::runtime("cannot write " + tmp + ": " + why());
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = why();
      close(fd);
      unlink(tmp.c_str());
      throw Error::runtime("cannot write " + tmp + ": " + err);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fsync(fd) == 0;
  if (close(fd) != 0 || !synced) {
    unlink(tmp.c_str());
    throw Error::runtime("cannot flush " + tmp + ": " + why());
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = why();
    unlink(tmp.c_str());
    throw Error::runtime("cannot rename " + tmp + " to " + path + ": " + err);
  }
  auto slash = path.find_last_of('/');
  fsync_path(slash == std::string::npos ? "." : path.substr(0, slash), O_RDONLY | O_DIRECTORY);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error::runtime("cannot read " + path + ": " + why());
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error::runtime("cannot create the folder " + path + ": " + ec.message());
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(target.parent_path().empty() ? "." : target.parent_path(), ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) fs::remove(entry.path(), ec);
  }
}

double cpu_seconds(bool system) {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  const timeval &t = system ? u.ru_stime : u.ru_utime;
  return double(t.tv_sec) + double(t.tv_usec) / 1e6;
}

long long peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;  // "VmHWM:  123 kB"
  }
  return 0;
}

}  // namespace loom::train
