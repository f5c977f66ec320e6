/* SPDX-License-Identifier: Apache-2.0 */
// The swarm key file: what `loom swarm keygen` writes and the collab
// strategy's `swarm_key` option reads. Two lines of text:
//
//   loom-swarm-key 1
//   <64 hex digits: 32 random bytes>
//
// Whoever holds the file may join the swarm, so it is written with mode 0600
// and a file that group or others may read is refused (as ssh refuses such a
// private key). Header-only and free of any crypto library: the key is
// random bytes from getrandom(2); what is derived from it is the plugin's.
#ifndef LOOM_COMMON_SWARM_KEY_H
#define LOOM_COMMON_SWARM_KEY_H

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace loom_key {

constexpr size_t kKeyBytes = 32;
using SwarmKey = std::array<uint8_t, kKeyBytes>;
inline constexpr const char *kKeyHeader = "loom-swarm-key 1";
inline constexpr size_t kMaxKeyFile = 4096;  // a key file is ~82 bytes; more is not one

inline std::string key_format_text() {
  return "a swarm key file holds the line '" + std::string(kKeyHeader) +
         "' and a line of 64 hex digits, as `loom swarm keygen FILE` writes it";
}

// Writes a new random key to path, which must not exist yet, with mode 0600.
// Returns false with *why (the file exists, the folder is missing, ...);
// *exists tells a path that already exists (a usage error) from the rest.
inline bool write_new_key(const std::string &path, std::string *why, bool *exists) {
  *exists = false;
  SwarmKey key;
  for (size_t got = 0; got < key.size();) {
    const ssize_t n = ::getrandom(key.data() + got, key.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = std::string("getrandom: ") + std::strerror(errno);
      return false;
    }
    got += size_t(n);
  }
  static const char *digits = "0123456789abcdef";
  std::string text = std::string(kKeyHeader) + "\n";
  for (uint8_t b : key) {
    text += digits[b >> 4];
    text += digits[b & 15];
  }
  text += "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *exists = errno == EEXIST;
    *why = "cannot create '" + path + "': " + std::strerror(errno) +
           (*exists ? " (a key is never overwritten: remove the old file first, or pick another path)" : "");
    return false;
  }
  bool ok = ::fchmod(fd, 0600) == 0;  // whatever the umask
  for (size_t off = 0; ok && off < text.size();) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += size_t(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    *why = "cannot write '" + path + "': " + std::strerror(err);
  }
  std::memset(key.data(), 0, key.size());
  std::fill(text.begin(), text.end(), '\0');
  return ok;
}

// Reads the key at path into *key. Returns false with *why naming what is
// wrong (missing, unreadable, readable by others, not a key file) and what
// would be valid.
inline bool read_key(const std::string &path, SwarmKey *key, std::string *why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot read swarm key '" + path + "': " + std::strerror(errno) +
           " (create one with `loom swarm keygen FILE` and give the same file to every peer)";
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *why = "swarm key '" + path + "' is not a regular file; " + key_format_text();
    return false;
  }
  if (st.st_mode & 077) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    *why = "swarm key '" + path + "' may be read by group or others (mode " + mode + "): run chmod 600 '" + path +
           "'; whoever reads it can join the swarm";
    return false;
  }
  std::string text(kMaxKeyFile + 1, '\0');
  size_t len = 0;
  for (;;) {
    const ssize_t n = ::read(fd, text.data() + len, text.size() - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += size_t(n);
    if (len == text.size()) break;
  }
  ::close(fd);
  text.resize(len);
  const std::string header = std::string(kKeyHeader) + "\n";
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  bool ok = len <= kMaxKeyFile && text.compare(0, header.size(), header) == 0 &&
            (len == header.size() + 64 || (len == header.size() + 65 && text.back() == '\n'));
  for (size_t i = 0; ok && i < kKeyBytes; ++i) {
    const int hi = hex(text[header.size() + 2 * i]), lo = hex(text[header.size() + 2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    if (ok) (*key)[i] = uint8_t(hi << 4 | lo);
  }
  std::fill(text.begin(), text.end(), '\0');
  if (!ok) {
    key->fill(0);
    *why = "'" + path + "' is not a swarm key: " + key_format_text();
  }
  return ok;
}

}  // namespace loom_key

#endif
